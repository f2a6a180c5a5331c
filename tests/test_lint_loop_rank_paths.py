"""Loop, accumulation and rank-divergence rules through `ddpcheck lint`, on the ways projects
write them: a logger made with the rank and passed into the training function (DDP020), a model
compiled only on the non-distributed path (DDP024). Each clean variant has a twin that is still
reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

# --- DDP020: a rank-tagged logger passed in as a parameter -----------------------------------

LOG_UTILS = """\
    import sys

    from loguru import logger


    def make_logger(rank, world_size):
        logger.remove()
        logger.add(sys.stdout, format="{{time}} | rank {{extra[rank]}}/{{extra[world_size]}} | {{message}}")
        return logger.bind(rank=rank, world_size=world_size)


    def plain_logger():
        logger.remove()
        logger.add(sys.stdout, format="{{time}} | {{message}}")
        return logger
    """

TAGGED_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from log_utils import make_logger, plain_logger


    def fit(model, loader, optimizer, epochs, log):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for images, labels in loader:
                loss = torch.nn.functional.cross_entropy(model(images.cuda()), labels.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            log.info(f"epoch {{epoch}} loss {{loss.item():.3f}}")


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        log = {factory}
        model = DDP(build_model().cuda())
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        fit(model, build_loader(), optimizer, 10, log)


    if __name__ == "__main__":
        main()
    """


def test_a_logger_made_with_the_rank_and_passed_in_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"log_utils.py": LOG_UTILS,
                             "train.py": TAGGED_TRAIN.format(factory="make_logger(rank, dist.get_world_size())")})
    assert finding_set(tmp_path, "train.py", "log_utils.py", select="DDP020") == set()


def test_a_plain_logger_passed_in_is_still_reported(tmp_path) -> None:
    write_project(tmp_path, {"log_utils.py": LOG_UTILS.replace("rank {{extra[rank]}}/{{extra[world_size]}} | ", ""),
                             "train.py": TAGGED_TRAIN.format(factory="plain_logger()")})
    assert finding_set(tmp_path, "train.py", "log_utils.py", select="DDP020") == {("train.py", 18, "DDP020")}


# --- DDP024: torch.compile only on the single-process path -----------------------------------

COMPILE_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def setup(args):
        if "WORLD_SIZE" not in os.environ:
            return False
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return True


    def main(args):
        distributed = setup(args)
        model = Net().cuda()
        if distributed:
            model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])])
        {compile_test}
            model = torch.compile(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer)
            if not distributed or dist.get_rank() == 0:
                torch.save({{"model": model.state_dict(), "epoch": epoch}}, "last.pt")
    """


def test_a_model_compiled_only_without_distribution_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": COMPILE_TRAIN.format(compile_test="if not distributed:")})
    assert finding_set(tmp_path, "train.py", select="DDP024") == set()


def test_a_model_compiled_on_every_path_is_still_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": COMPILE_TRAIN.format(compile_test="if args.compile:")})
    assert finding_set(tmp_path, "train.py", select="DDP024") == {("train.py", 27, "DDP024")}


# --- DDP016: accumulation written through methods and counters ------------------------------

METHOD_BACKWARD = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Runner:
        def __init__(self, model, optimizer, accum_steps):
            self.model = DDP(model.cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
            self.optimizer = optimizer
            self.accum_steps = accum_steps

        def _forward_backward(self, batch):
            loss = self.model(**batch).loss / self.accum_steps
            loss.backward()
            return loss.item()

        def train_epoch(self, loader):
            self.optimizer.zero_grad()
            for i, batch in enumerate(loader):
                self._forward_backward(batch)
                {step_test}
                    self.optimizer.step()
                    self.optimizer.zero_grad()


    def main():
        dist.init_process_group("nccl")
        runner = Runner(build_model(), build_optimizer(), accum_steps=8)
        for epoch in range(10):
            runner.train_epoch(build_loader(epoch))
    """


def test_backward_in_a_method_with_a_step_every_few_batches_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": METHOD_BACKWARD.format(step_test="if (i + 1) % self.accum_steps == 0:")})
    assert finding_set(tmp_path, "train.py", select="DDP016") == {("train.py", 22, "DDP016")}


def test_backward_in_a_method_with_a_step_every_batch_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": METHOD_BACKWARD.format(step_test="if batch is not None:")})
    assert finding_set(tmp_path, "train.py", select="DDP016") == set()


RESET_COUNTER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(cfg, model, loader, optimizer):
        model = DDP(model.cuda())
        count = 0
        for epoch in range(cfg.epochs):
            for points in loader:
                count += 1
                loss = model(points.cuda())
                loss.backward()
                if count == cfg.step_per_update:
                    {reset}
                    optimizer.step()
                    model.zero_grad()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        train(load_config(), build_model(), build_loader(), build_optimizer())
    """


def test_a_step_when_a_reset_counter_reaches_the_update_interval_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": RESET_COUNTER.format(reset="count = 0")})
    assert finding_set(tmp_path, "train.py", select="DDP016") == {("train.py", 13, "DDP016")}


def test_a_step_at_one_count_that_is_never_reset_is_quiet(tmp_path) -> None:
    # `count == n` with no reset holds once in the run: a one-off, not an accumulation cycle.
    write_project(tmp_path, {"train.py": RESET_COUNTER.format(reset="print('first update')")})
    assert finding_set(tmp_path, "train.py", select="DDP016") == set()


MICRO_BATCH_METHOD = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, optimizer):
            self.model = DDP(model.cuda())
            self.optimizer = optimizer

        def compute_gradients(self, chunks):
            total = 0.0
            for chunk in chunks:
                loss = self.model(chunk.cuda()) / len(chunks)
                loss.backward()
                total += loss.item()
            return total

        def apply_gradients(self):
            {apply}

        def fit(self, batches, steps):
            for _ in range(steps):
                self.compute_gradients(batches.next(self.chunks_per_step))
                self.apply_gradients()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        Trainer(build_model(), build_optimizer()).fit(build_batches(), 1000)
    """


def test_micro_batches_back_propagated_in_one_method_and_stepped_in_another_are_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": MICRO_BATCH_METHOD.format(
        apply="self.optimizer.step()\n            self.optimizer.zero_grad()")})
    assert finding_set(tmp_path, "train.py", select="DDP016") == {("train.py", 15, "DDP016")}


def test_micro_batches_with_no_step_after_them_are_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": MICRO_BATCH_METHOD.format(apply="self.model.zero_grad()")})
    assert finding_set(tmp_path, "train.py", select="DDP016") == set()


# --- DDP035: a skip tested on a method of a rank's own mask ----------------------------------

NAN_SKIP = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_epoch(model, loader, optimizer, device, world_size):
        total, seen = 0.0, 0
        for i, batch in enumerate(loader):
            feats = batch["features"].to(device)
            labels = batch["label"].to(device)
            keep = {mask}
            feats, labels = feats[keep], labels[keep]
            if keep.sum() == 0:
                continue
            loss = torch.nn.functional.cross_entropy(model(feats), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            seen += 1
            if i % 100 == 0:
                t = torch.tensor(total / max(seen, 1), device=device)
                dist.all_reduce(t)


    @torch.no_grad()
    def evaluate(model, loader, device):
        correct = torch.zeros(1, device=device)
        for i, batch in enumerate(loader):
            feats = batch["features"].to(device)
            keep = {mask}
            if keep.sum() == 0:
                continue
            correct += (model(feats[keep]).argmax(1) == batch["label"].to(device)[keep]).sum()
            if i % 50 == 0:
                dist.all_reduce(correct)
        return correct


    def main(args):
        dist.init_process_group("nccl")
        device = torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
        model = DDP(build_model().to(device))
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(args.epochs):
            train_epoch(model, build_loader(epoch), optimizer, device, dist.get_world_size())
            evaluate(model, build_loader(-1), device)
    """


def test_a_skip_on_a_rank_own_mask_is_reported_in_training_and_evaluation(tmp_path) -> None:
    write_project(tmp_path, {"train.py": NAN_SKIP.format(mask="~torch.isnan(feats).any(dim=-1)")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 14, "DDP035"),
                                                                  ("train.py", 33, "DDP035")}


def test_a_skip_on_a_mask_every_rank_shares_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": NAN_SKIP.format(mask="batch['valid']")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


# --- DDP035: a rank leaving a `while` loop alone, and errors swallowed around the step --------

WHILE_TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, cfg, model, loader):
            self.cfg = cfg
            self.rank = dist.get_rank()
            self.is_main = self.rank == 0
            self.model = DDP(model.cuda())
            self.loader = loader
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
            self.step = 0

        def train(self):
            batches = iter(self.loader)
            while self.step < self.cfg.max_steps:
                try:
                    batch = next(batches)
                except StopIteration:
                    batches = iter(self.loader)
                    batch = next(batches)
                {handler}
                loss = self.model(**batch).loss
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
                self.step += 1
                if self.step % self.cfg.eval_every == 0:
                    {leave}


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        Trainer(load_config(), build_model(), build_loader()).train()
    """


def test_a_return_under_a_rank_test_in_a_while_training_loop_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": WHILE_TRAINER.format(
        handler="", leave="if self.cfg.eval_only and self.is_main:\n                        return")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 32, "DDP035")}


def test_a_return_every_rank_takes_in_a_while_training_loop_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": WHILE_TRAINER.format(
        handler="", leave="if self.cfg.eval_only:\n                        return")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_a_break_on_any_error_fetching_the_batch_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": WHILE_TRAINER.format(
        handler="", leave="pass").replace(
        "                    batch = next(batches)\n                \n",
        "                    batch = next(batches)\n                except Exception as e:\n"
        "                    print(f'data error: {e}')\n                    break\n")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 26, "DDP035")}


STEP_GUARD = """\
    import logging

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    logger = logging.getLogger(__name__)


    def train(model, loader, optimizer, epochs):
        model = DDP(model.cuda())
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for step, batch in enumerate(loader):
                try:
                    loss = model(batch["input_ids"].cuda(), batch["labels"].cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                except {caught}:
                    logger.exception("step %d failed", step)
                    {after}


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        train(build_model(), build_loader(), build_optimizer(), 3)
    """


def test_a_training_step_that_swallows_every_error_and_continues_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": STEP_GUARD.format(caught="Exception", after="continue")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 22, "DDP035")}


def test_a_training_step_that_logs_and_re_raises_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": STEP_GUARD.format(caught="Exception", after="raise")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_a_keyboard_interrupt_that_ends_training_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": STEP_GUARD.format(caught="KeyboardInterrupt", after="break")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


# --- DDP020: a bar the loop iterates through `enumerate` -------------------------------------

ENUMERATED_BAR = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    def train(model, optimizer, batches, iterations, rank):
        model = DDP(model.cuda(), device_ids=[rank])
        pbar = tqdm(range(iterations){disable})
        for it, _ in enumerate(pbar):
            data = next(batches)
            loss = model(data["image"].cuda()).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            pbar.set_description(f"loss {{loss.item():.3f}}")


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        train(build_model(), build_optimizer(), build_batches(), 10000, dist.get_rank())
    """


def test_a_bar_over_the_training_steps_iterated_through_enumerate_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": ENUMERATED_BAR.format(disable="")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 9, "DDP020")}


def test_a_bar_iterated_through_enumerate_and_hidden_off_rank_zero_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": ENUMERATED_BAR.format(disable=", disable=rank != 0")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


# --- DDP031: the sync switch set after the micro-step's forward -------------------------------

LATE_SWITCH = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(net, batches, optimizer, accum, steps):
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(net.cuda(local_rank), device_ids=[local_rank])
        for _ in range(steps):
            for micro in range(accum):
                x, y = next(batches)
                {first}
                {second}
                loss = loss / accum
                loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        train(build_net(), build_batches(), build_optimizer(), 4, 1000)
    """

FORWARD = "loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())"
SWITCH = "model.require_backward_grad_sync = micro == accum - 1"


def test_a_sync_switch_set_after_the_forward_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": LATE_SWITCH.format(first=FORWARD, second=SWITCH)})
    assert finding_set(tmp_path, "train.py", select="DDP031") == {("train.py", 15, "DDP031")}


def test_a_sync_switch_set_before_the_forward_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": LATE_SWITCH.format(first=SWITCH, second=FORWARD)})
    assert finding_set(tmp_path, "train.py", select="DDP031") == set()


def test_a_narrow_try_around_data_handling_before_the_backward_is_quiet(tmp_path) -> None:
    # The reshape fails on the short last batch, which every rank gets alike: not judged.
    write_project(tmp_path, {"train.py": STEP_GUARD.replace(
        '''                try:
                    loss = model(batch["input_ids"].cuda(), batch["labels"].cuda())
                    loss.backward()''', '''                try:
                    labels = batch["labels"].reshape(loader.batch_size, -1).cuda()''').replace(
        '''                    {after}''', '''                    {after}
                loss = model(batch["input_ids"].cuda(), labels)
                loss.backward()''').format(caught="Exception", after="continue")})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


PROBE = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def largest_batch(build, sample, limit):
        probe = build()
        size = 1
        best = 0
        while size <= limit:
            try:
                out = probe(sample.repeat(size, 1).cuda())
                out.sum().backward()
                best = size
                size *= 2
            except Exception:
                break
        return best


    def main():
        dist.init_process_group("nccl")
        batch = largest_batch(build_model, example_input(), 4096)
        model = DDP(build_model().cuda())
        train(model, batch)
    """


def test_a_memory_probe_on_a_plain_model_that_stops_at_any_error_is_quiet(tmp_path) -> None:
    # Each rank probes its own copy with no collective in the loop: leaving it alone hangs nothing.
    write_project(tmp_path, {"train.py": PROBE})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_workers_started_in_a_loop_are_not_micro_batches(tmp_path) -> None:
    write_project(tmp_path, {"train.py": """\
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        from torch.nn.parallel import DistributedDataParallel as DDP


        def worker(rank, world):
            dist.init_process_group("gloo", rank=rank, world_size=world)
            model = DDP(build_model())
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in build_loader(rank, world):
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()


        def launch(world):
            workers = []
            for rank in range(world):
                p = mp.Process(target=worker, args=(rank, world))
                p.start()
                workers.append(p)
            for p in workers:
                p.join()


        if __name__ == "__main__":
            launch(4)
        """})
    assert finding_set(tmp_path, "train.py", select="DDP016") == set()
