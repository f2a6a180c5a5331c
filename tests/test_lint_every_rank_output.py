"""Console output repeated on every rank (DDP020) in the ways projects write their trainers,
through `ddpcheck lint`: a trainer class that `mp.spawn` builds in each process, a training
function called from both arms of a rank test, a function bound to another name, a guard whose
own branch changes the flag it tests, and an evaluation bar over loaders the model cannot
follow. The clean variants stay clean."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAINER_BASE = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    from tqdm import tqdm


    class BaseTrainer:
        def __init__(self, rank, world_size):
            self.rank = rank
            parser = argparse.ArgumentParser()
            parser.add_argument("--epochs", type=int, default=10)
            parser.add_argument("--no-progress", action="store_true")
            self.args = parser.parse_args()
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            self.build()
            self.fit()
            dist.destroy_process_group()

        def build(self):
            raise NotImplementedError

        def fit(self):
            sampler = DistributedSampler(self.dataset)
            loader = DataLoader(self.dataset, batch_size=32, sampler=sampler)
            model = DistributedDataParallel(self.network.to(self.rank), device_ids=[self.rank])
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            self.step = 0
            for epoch in range(self.args.epochs):
                sampler.set_epoch(epoch)
                print("starting epoch", epoch)
                for images, masks in tqdm(loader, disable={disable}):
                    loss = torch.nn.functional.l1_loss(model(images.to(self.rank)), masks.to(self.rank))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if self.step == 0:
                        print("first batch", images.shape)
                    self.step += 1
    """

TRAINER_SCRIPT = """\
    import torch
    import torch.multiprocessing as mp

    from base_trainer import BaseTrainer
    from nets import MattingNet, MattingSet


    class MattingTrainer(BaseTrainer):
        def build(self):
            self.network = MattingNet()
            self.dataset = MattingSet("data/train")


    if __name__ == "__main__":
        gpus = torch.cuda.device_count()
        mp.spawn(MattingTrainer, nprocs=gpus, args=(gpus,), join=True)
    """


def _trainer(tmp_path, disable: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"base_trainer.py": TRAINER_BASE.format(disable=disable),
                             "train.py": TRAINER_SCRIPT,
                             "nets.py": "class MattingNet:\n    pass\n\n\nclass MattingSet:\n    pass\n"})
    return finding_set(tmp_path, "train.py", select="DDP020")


def test_a_trainer_class_spawned_per_process_prints_on_every_rank(tmp_path):
    # The bar's `disable=` is a command-line switch, the same on every rank; the message at the
    # first step (a counter that only grows) is printed once.
    assert _trainer(tmp_path, "self.args.no_progress") == {
        ("base_trainer.py", 33, "DDP020"), ("base_trainer.py", 34, "DDP020")}


def test_a_bar_disabled_by_rank_in_a_spawned_trainer_is_clean(tmp_path):
    assert _trainer(tmp_path, "self.rank != 0") == {("base_trainer.py", 33, "DDP020")}


BOTH_ARMS = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm


    def train_epoch(epoch, model, loader, optimizer, writer):
        model.train()
        for step, (wave, target) in enumerate(tqdm(loader)):
            loss = model(wave.cuda(), target.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if writer is not None:
                writer.add_scalar("loss", loss.item(), step)


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = torch.nn.parallel.DistributedDataParallel(build_model().cuda())
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
        loader = DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset))
        writer = SummaryWriter("logs") if rank == 0 else None
        for epoch in range(100):
            if rank == 0:
                train_epoch(epoch, model, loader, optimizer, writer)
    {other_arm}
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_function_called_from_both_arms_of_a_rank_test_runs_on_every_rank(tmp_path):
    other = "        else:\n                train_epoch(epoch, model, loader, optimizer, None)\n"
    write_project(tmp_path, {"train.py": BOTH_ARMS.format(other_arm=other)})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 12, "DDP020")}


def test_a_function_called_from_the_rank_zero_arm_only_is_clean(tmp_path):
    write_project(tmp_path, {"train.py": BOTH_ARMS.format(other_arm="")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


GRAD_NORM = """\
    import os

    import torch
    import torch.distributed as dist


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = torch.nn.parallel.DistributedDataParallel(build_model().cuda(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        verbose = False
        for step, batch in enumerate(loader):
            loss = model(batch)
            loss.backward()
            skip = False
            if not skip:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
                if norm > 10.0:
                    skip = True
                    print(f"step {step}: gradient norm {norm:.1f}, update skipped")
            if verbose:
                print(f"step {step}: loss {loss.item():.4f}")
            if not skip:
                optimizer.step()
            optimizer.zero_grad()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_guard_is_read_before_its_own_branch_changes_the_flag(tmp_path):
    # `skip = True` inside the branch does not make `if not skip:` false for the print after it;
    # `if verbose:` with `verbose = False` is still a branch no run takes.
    write_project(tmp_path, {"train.py": GRAD_NORM})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 21, "DDP020")}


ALIASED = """\
    import torch
    import torch.distributed as dist

    from engine import train_steps


    def main(args):
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(build_model(args).cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if args.trainer == "steps":
            train = train_steps
        else:
            raise ValueError(args.trainer)
        train(model, optimizer, loader, args.iterations)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
    """

ENGINE = """\
    def train_steps(model, optimizer, loader, iterations):
        step = 0
        while step < iterations:
            for batch in loader:
                model(batch).backward()
                optimizer.step()
                optimizer.zero_grad()
                step += 1
            print(f"pass over the data done at step {step}")
    """


def test_a_training_function_called_under_another_name_prints_on_every_rank(tmp_path):
    write_project(tmp_path, {"train.py": ALIASED, "engine.py": ENGINE})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("engine.py", 9, "DDP020")}


EVAL_SCRIPT = """\
    import logging

    import torch
    import torch.distributed as dist
    from tqdm import tqdm

    from data import build_test_loaders


    def run_inference(model, loader, device):
        results = {{}}
        for batch in tqdm(loader{disable}):
            images, ids = batch
            with torch.no_grad():
                outputs = model(images.to(device))
            results.update(zip(ids, outputs))
        return results


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING)
        device = torch.device("cuda", rank % torch.cuda.device_count())
        model = torch.nn.parallel.DistributedDataParallel(build_detector().to(device))
        for name, loader in zip(["val", "test"], build_test_loaders()):
            logging.info("evaluating %s", name)
            predictions = run_inference(model, loader, device)
            dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_an_evaluation_bar_over_loaders_from_a_builder_runs_on_every_rank(tmp_path):
    # The logger is silenced on the other ranks; the bar is not.
    write_project(tmp_path, {"evaluate.py": EVAL_SCRIPT.format(disable="")})
    assert finding_set(tmp_path, "evaluate.py", select="DDP020") == {("evaluate.py", 12, "DDP020")}


def test_an_evaluation_bar_disabled_off_rank_zero_is_clean(tmp_path):
    write_project(tmp_path, {"evaluate.py": EVAL_SCRIPT.format(disable=", disable=dist.get_rank() != 0")})
    assert finding_set(tmp_path, "evaluate.py", select="DDP020") == set()


TRUNCATED_EVAL = """\
    import logging

    import torch
    import torch.distributed as dist

    logging.basicConfig(level=logging.INFO)


    def main(args):
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(build_ranker(args).cuda())
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            for batch in train_loader:
                model(batch).backward()
                optimizer.step()
                optimizer.zero_grad()
            for step, batch in enumerate(eval_loader):
                scores = model(batch)
                if step + 1 >= args.partial_eval_steps:
                    logging.info(f"epoch {epoch}: evaluation truncated after {step + 1} steps")
                    break
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
    """


def test_a_message_on_the_way_out_of_an_inner_loop_repeats_each_epoch(tmp_path):
    write_project(tmp_path, {"train.py": TRUNCATED_EVAL})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 21, "DDP020")}


PROCESS_LAUNCHER = """\
    import multiprocessing as mp
    import os

    import torch
    import torch.distributed as dist


    def load_weights(model, path):
        model.load_state_dict(torch.load(path, map_location="cpu"))
        print(f"loaded weights from {path}")


    def worker(rank, world_size, path):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29500"
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = build_model()
        load_weights(model, path)
        model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        world_size = 4
        for rank in range(world_size):
            mp.Process(target=worker, args=(rank, world_size, "init.pt")).start()
    """


def test_the_loop_that_starts_the_processes_is_not_a_training_loop(tmp_path):
    # The start-up message runs once per process, not at each step: the loop around
    # `Process(...).start()` starts workers, its iterations are not training steps.
    write_project(tmp_path, {"train.py": PROCESS_LAUNCHER})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()
