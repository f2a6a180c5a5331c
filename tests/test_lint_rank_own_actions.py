"""What each rank does on its own, through `ddpcheck lint`: a seed set alike on every rank by a
project helper, and a backward skipped on a value computed from the rank's own batch. Each test
writes a small project in the style of real training scripts and reads what the user sees."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project


def _findings(root: Path, files: dict[str, str], select: str) -> set[tuple[str, int, str]]:
    write_project(root, files)
    return finding_set(root, next(iter(files)), select=select)


# A seeding helper in the project's utility package that also seeds the GPUs when there are any.
SEED_UTILS = """\
    import random

    import numpy
    import torch


    def seed(value):
        random.seed(value)
        numpy.random.seed(value)
        torch.manual_seed(value)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(value)
    """

SPAWN_TRAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import tools.utils as utils


    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 6))

        def forward(self, obs):
            return torch.distributions.Categorical(logits=self.body(obs))


    def train(gpu, args):
        dist.init_process_group("nccl", rank=gpu, world_size=args.gpus)
        model = DDP(Policy().cuda(gpu), device_ids=[gpu])
        utils.seed(SEED_EXPR)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
        for update in range(args.updates):
            dist_ = model(collect(gpu))
            loss = -dist_.log_prob(dist_.sample()).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--gpus", type=int, default=2)
        parser.add_argument("--updates", type=int, default=1000)
        args = parser.parse_args()
        utils.seed(args.seed)
        mp.spawn(train, nprocs=args.gpus, args=(args,))
    """


def test_seeding_helper_that_checks_for_gpus_is_judged_by_what_it_is_passed(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_TRAIN.replace("SEED_EXPR", "args.seed"), "tools/__init__.py": "",
             "tools/utils.py": SEED_UTILS}
    # The call in the worker seeds every rank alike; the one before mp.spawn seeds only the launcher.
    assert _findings(tmp_path, files, "DDP029") == {("train.py", 24, "DDP029")}


def test_seeding_helper_given_the_rank_stays_clean(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_TRAIN.replace("SEED_EXPR", "args.seed + gpu"), "tools/__init__.py": "",
             "tools/utils.py": SEED_UTILS}
    assert _findings(tmp_path, files, "DDP029") == set()


def test_helper_that_does_more_than_seed_is_judged_at_its_own_seed_with_what_the_run_passes(tmp_path: Path) -> None:
    # A helper that also sets the device is not a seeding helper (its call is not judged by what
    # it passes); its own `torch.manual_seed(value)` is, with the value the worker hands it:
    # `args.seed`, the same on every rank.
    utils = SEED_UTILS.replace("torch.cuda.manual_seed_all(value)",
                               "torch.cuda.manual_seed_all(value)\n        torch.cuda.set_device(0)")
    files = {"train.py": SPAWN_TRAIN.replace("SEED_EXPR", "args.seed"), "tools/__init__.py": "",
             "tools/utils.py": utils}
    assert _findings(tmp_path, files, "DDP029") == {("utils.py", 10, "DDP029")}


def test_helper_that_does_more_than_seed_given_the_rank_stays_clean(tmp_path: Path) -> None:
    utils = SEED_UTILS.replace("torch.cuda.manual_seed_all(value)",
                               "torch.cuda.manual_seed_all(value)\n        torch.cuda.set_device(0)")
    files = {"train.py": SPAWN_TRAIN.replace("SEED_EXPR", "args.seed + gpu"), "tools/__init__.py": "",
             "tools/utils.py": utils}
    assert _findings(tmp_path, files, "DDP029") == set()


GRAPH_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from graphs import GraphNet, load_crystals, merge_graphs


    def batch_loss(batch, model, device):
        graphs = [g for g in batch if g.num_nodes > 0]
        if not graphs:
            return None
        merged = merge_graphs(graphs).to(device)
        return torch.nn.functional.cross_entropy(model(merged), merged.y)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        crystals = load_crystals("train")
        sampler = DistributedSampler(crystals)
        loader = DataLoader(crystals, batch_size=16, sampler=sampler, collate_fn=list)
        model = DDP(GraphNet().to(device), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(50):
            sampler.set_epoch(epoch)
            for batch in loader:
                loss = batch_loss(batch, model, device)
                if loss is None:
                    continue
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_skip_when_the_rank_own_batch_gives_no_loss(tmp_path: Path) -> None:
    assert _findings(tmp_path, {"train.py": GRAPH_TRAIN}, "DDP035") == {("train.py", 34, "DDP035")}


def test_skip_on_a_value_every_rank_shares_stays_clean(tmp_path: Path) -> None:
    # `scheduler_state` comes from no batch: every rank loads the same file.
    text = GRAPH_TRAIN.replace(
        "                loss = batch_loss(batch, model, device)\n                if loss is None:",
        "                loss = batch_loss(batch, model, device)\n                if resume is None:",
    ).replace("        for epoch in range(50):",
              "        resume = load_state(\"last.pt\")\n        for epoch in range(50):")
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == set()


def test_skip_after_the_backward_stays_clean(tmp_path: Path) -> None:
    text = GRAPH_TRAIN.replace(
        "                if loss is None:\n                    continue\n                optimizer.zero_grad()\n"
        "                loss.backward()\n",
        "                optimizer.zero_grad()\n                loss.backward()\n"
        "                if loss is None:\n                    continue\n",
    )
    assert text != GRAPH_TRAIN
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == set()


EARLY_STOP = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from digits import DigitNet, digit_splits


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        train_set, val_set = digit_splits()
        train_loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=256, sampler=DistributedSampler(val_set))
        model = DDP(DigitNet().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
        best, improved, stale, patience = float("inf"), False, 0, 5
        for epoch in range(100):
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                F.nll_loss(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            model.eval()
            val_loss = 0.0
            with torch.no_grad():
                for x, y in val_loader:
                    val_loss += F.nll_loss(model(x.cuda()), y.cuda(), reduction="sum").item()
            AGREE
            if val_loss < best:
                best = val_loss
                improved = True
            if not improved:
                stale += 1
            if stale >= patience:
                break
            improved = False
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_early_stop_counted_on_the_rank_own_validation_loss(tmp_path: Path) -> None:
    text = EARLY_STOP.replace("            AGREE\n", "")
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == {("train.py", 39, "DDP035")}


def test_early_stop_on_an_all_reduced_validation_loss_stays_clean(tmp_path: Path) -> None:
    text = EARLY_STOP.replace(
        "AGREE",
        "total = torch.tensor(val_loss, device=\"cuda\")\n"
        "            dist.all_reduce(total)\n"
        "            val_loss = total.item()",
    )
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == set()


def test_stale_count_on_the_epoch_number_stays_clean(tmp_path: Path) -> None:
    # Counted on the epoch alone: every rank holds the same count.
    text = EARLY_STOP.replace("            AGREE\n", "").replace("            if not improved:\n",
                                                                  "            if epoch % 10 == 9:\n")
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == set()


STAGED = """\
    import torch
    import torch.distributed as dist


    def fit(model, ddp_model, loader, optimizer, rank, max_epochs, stage_two_start, patience):
        epoch, stale, best = 0, 0, float("inf")
        while epoch < max_epochs:
            for batch in loader:
                optimizer.zero_grad()
                ddp_model(batch).mean().backward()
                optimizer.step()
            val_loss = evaluate(model)
            if rank == 0:
                if val_loss >= best:
                    stale += 1
                    if stale >= patience and epoch < stage_two_start:
                        epoch = stage_two_start
                else:
                    best, stale = val_loss, 0
            JUMP
            dist.barrier()
            epoch += 1
    """


def test_rank_zero_alone_jumping_the_epoch_counter_of_a_while_loop(tmp_path: Path) -> None:
    text = STAGED.replace("            JUMP\n", "")
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == {("train.py", 17, "DDP035")}


def test_epoch_counter_broadcast_from_rank_zero_stays_clean(tmp_path: Path) -> None:
    text = STAGED.replace(
        "JUMP",
        "shared = torch.tensor([epoch], device=\"cuda\")\n"
        "            dist.broadcast(shared, src=0)\n"
        "            epoch = int(shared.item())",
    )
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == set()


def test_epoch_counter_set_again_on_every_rank_stays_clean(tmp_path: Path) -> None:
    # Every rank makes the same jump: the guard only wraps rank 0's bookkeeping.
    text = STAGED.replace("            JUMP\n", "").replace(
        "                    if stale >= patience and epoch < stage_two_start:\n"
        "                        epoch = stage_two_start\n", "")
    assert _findings(tmp_path, {"train.py": text}, "DDP035") == set()


OOM_STEP = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, net, optimizer, local_rank):
            self.model = DDP(net.cuda(local_rank), device_ids=[local_rank])
            self.optimizer = optimizer

        def train_step(self, batch):
            try:
                loss = self.model(batch["feats"].cuda()).mean()
            except RuntimeError as err:
                if "out of memory" in str(err):
                    torch.cuda.empty_cache()
                    print("CUDA OOM, skipping this batch")
                    return False
                raise
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            return True

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                for batch in loader:
                    self.train_step(batch)
    """


def test_step_that_returns_on_its_own_out_of_memory_before_backward(tmp_path: Path) -> None:
    assert _findings(tmp_path, {"trainer.py": OOM_STEP}, "DDP035") == {("trainer.py", 18, "DDP035")}


def test_step_that_returns_on_a_missing_key_stays_clean(tmp_path: Path) -> None:
    # A KeyError on a malformed batch config is not what the rule knows to be a rank's own event.
    text = OOM_STEP.replace("except RuntimeError as err:", "except KeyError as err:")
    assert _findings(tmp_path, {"trainer.py": text}, "DDP035") == set()


def test_step_that_returns_after_its_backward_stays_clean(tmp_path: Path) -> None:
    text = OOM_STEP.replace(
        "            try:\n                loss = self.model(batch[\"feats\"].cuda()).mean()\n",
        "            loss = self.model(batch[\"feats\"].cuda()).mean()\n            loss.backward()\n"
        "            try:\n                self.optimizer.step()\n",
    ).replace("            loss.backward()\n            self.optimizer.step()\n", "")
    assert "try:\n                self.optimizer.step()" in text
    assert _findings(tmp_path, {"trainer.py": text}, "DDP035") == set()


def test_broad_except_about_memory_counts_and_a_plain_one_does_not(tmp_path: Path) -> None:
    broad = OOM_STEP.replace("except RuntimeError as err:", "except Exception as err:")
    assert _findings(tmp_path, {"trainer.py": broad}, "DDP035") == {("trainer.py", 18, "DDP035")}
    plain = broad.replace('if "out of memory" in str(err):', "if err.args:").replace(
        'print("CUDA OOM, skipping this batch")', 'print("skipping this batch")')
    assert _findings(tmp_path, {"trainer.py": plain}, "DDP035") == set()


# An epoch loop whose validation losses are reduced to rank 0 (a collective every rank makes),
# and whose early-stopping decision is then taken in a block only some ranks enter.
RANK_BLOCK_STOP = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Stopper:
        def __init__(self, patience):
            self.patience = patience
            self.bad = 0
            self.best = None
            self.stop = False

        def __call__(self, value):
            if self.best is None or value < self.best:
                self.best, self.bad = value, 0
            else:
                self.bad += 1
                self.stop = self.bad >= self.patience


    def fit(model, loader, val_loss_of, optimizer, epochs, local_rank):
        stopper = Stopper(5)
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            val = val_loss_of(model)
            dist.reduce(val, 0, op=dist.ReduceOp.SUM)
            if {test}:
                stopper(val.item())
                if stopper.stop:
                    {leave}


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(6, 1).cuda(), device_ids=[local_rank])
        fit(net, make_loader(), make_validator(), torch.optim.SGD(net.parameters(), lr=0.1), 50, local_rank)
        dist.destroy_process_group()
    """


def test_early_stop_break_inside_a_rank_zero_block(tmp_path: Path) -> None:
    files = {"fit.py": RANK_BLOCK_STOP.format(test="local_rank == 0", leave="break")}
    assert _findings(tmp_path, files, "DDP035") == {("fit.py", 37, "DDP035")}


def test_early_stop_return_inside_a_block_of_the_other_ranks(tmp_path: Path) -> None:
    files = {"fit.py": RANK_BLOCK_STOP.format(test="dist.get_rank() > 0", leave="return")}
    assert _findings(tmp_path, files, "DDP035") == {("fit.py", 37, "DDP035")}


def test_early_stop_break_in_a_block_every_rank_enters_stays_clean(tmp_path: Path) -> None:
    files = {"fit.py": RANK_BLOCK_STOP.format(test="epoch >= 10", leave="break")}
    assert _findings(tmp_path, files, "DDP035") == set()


# A NaN skip before the backward, while the loop all-reduces the logged loss later in the step.
NAN_SKIP = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            running = torch.zeros(1, device="cuda")
            for step, (feats, labels) in enumerate(loader):
                loss = torch.nn.functional.cross_entropy(model(feats.cuda()), labels.cuda())
                {agree}
                if torch.isnan(loss):
                    continue
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                running += loss.detach()
                if step % 100 == 0:
                    dist.all_reduce(running)
                    running.zero_()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(6, 3).cuda(), device_ids=[local_rank])
        train(net, make_loader(), torch.optim.SGD(net.parameters(), lr=0.1), 5)
    """


def test_nan_skip_before_a_later_all_reduce_of_the_logged_loss(tmp_path: Path) -> None:
    files = {"train.py": NAN_SKIP.format(agree="pass")}
    assert _findings(tmp_path, files, "DDP035") == {("train.py", 16, "DDP035")}


def test_nan_skip_after_the_loss_is_all_reduced_stays_clean(tmp_path: Path) -> None:
    files = {"train.py": NAN_SKIP.format(agree="dist.all_reduce(loss)")}
    assert _findings(tmp_path, files, "DDP035") == set()


# Every rank trains after a start-up check that raises on rank 0 when the output folder is taken.
GUARDED_START = """\
    import os
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run(out_dir, model, loader, optimizer, max_steps):
        if {test}:
            raise RuntimeError(f"{{out_dir}} is not empty")
        steps = 0
        while True:
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                steps += 1
                if steps >= max_steps:
                    break
            if steps >= max_steps:
                break


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(6, 1).cuda(), device_ids=[local_rank])
        run("out", net, make_loader(), torch.optim.SGD(net.parameters(), lr=0.1), 1000)
        dist.destroy_process_group()
    """


def test_step_count_after_a_rank_zero_folder_check_stays_clean(tmp_path: Path) -> None:
    files = {"run.py": GUARDED_START.format(test="dist.get_rank() == 0 and os.listdir(out_dir)")}
    assert _findings(tmp_path, files, "DDP035") == set()


def test_step_count_after_a_folder_check_on_every_rank_stays_clean(tmp_path: Path) -> None:
    files = {"run.py": GUARDED_START.format(test="os.listdir(out_dir)")}
    assert _findings(tmp_path, files, "DDP035") == set()


def test_step_count_kept_by_rank_zero_only_after_the_check(tmp_path: Path) -> None:
    files = {"run.py": GUARDED_START.format(test="dist.get_rank() != 0").replace(
        "raise RuntimeError(f\"{out_dir} is not empty\")", "time.sleep(1)").replace(
        "                steps += 1", "                if dist.get_rank() == 0:\n                    steps += 1")}
    assert _findings(tmp_path, files, "DDP035") == {("run.py", 22, "DDP035")}
