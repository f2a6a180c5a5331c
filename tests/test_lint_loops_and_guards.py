"""Which loops are training loops, and which values a guard's test can see, through
`ddpcheck lint`. Each test writes a small project in the style of real training scripts and reads
what the user sees."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project


def _findings(root: Path, files: dict[str, str], select: str) -> set[tuple[str, int, str]]:
    write_project(root, files)
    return finding_set(root, *files, select=select)


PREPARE = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from data import load_split, prepare_split


    def prepare_all():
        for split in ("train", "val"):
            print(f"preparing the {split} split")
            if dist.get_rank() == 0:
                prepare_split(split)
            dist.barrier()


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        prepare_all()
        train_set = load_split("train")
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        model = DDP(torch.nn.Linear(16, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            PER_EPOCH
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_loop_that_only_waits_at_a_barrier_is_start_up_code(tmp_path):
    script = PREPARE.replace("PER_EPOCH", "pass")
    assert _findings(tmp_path, {"train.py": script}, "DDP020") == set()


def test_a_barrier_loop_called_from_the_epoch_loop_repeats_its_print_every_epoch(tmp_path):
    script = PREPARE.replace("PER_EPOCH", "prepare_all()")
    assert ("train.py", 37, "DDP020") in _findings(tmp_path, {"train.py": script}, "DDP020")


SEEDED = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from nets import Classifier
    from data import load_split

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local-rank", type=int, default=0)


    def main():
        args = parser.parse_args()
        dist.init_process_group("nccl")
        torch.manual_seed(args.seed)
        torch.cuda.set_device(args.local_rank)
        train_set = load_split("train")
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=64, sampler=sampler)
        model = DDP(Classifier().cuda(), device_ids=[args.local_rank])
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(5):
            sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                F.nll_loss(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

NETS = """\
    import torch.nn as nn
    import torch.nn.functional as F


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            {extra}
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return F.log_softmax(self.fc2(self.hidden(F.relu(self.fc1(x.flatten(1))))), dim=1)
    """


def test_the_same_seed_is_reported_when_the_model_draws_dropout_masks(tmp_path):
    files = {"train.py": SEEDED, "nets.py": NETS.format(extra="self.hidden = nn.Dropout(0.5)")}
    assert ("train.py", 20, "DDP029") in _findings(tmp_path, files, "DDP029")


def test_the_same_seed_is_silent_when_training_draws_nothing_at_random(tmp_path):
    files = {"train.py": SEEDED, "nets.py": NETS.format(extra="self.hidden = nn.Identity()")}
    assert _findings(tmp_path, files, "DDP029") == set()


WRITER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter


    def open_writer(log_dir, writer=None):
        if writer is None:
            writer = SummaryWriter(log_dir) if dist.get_rank() == 0 else None
            dist.barrier()
        return writer


    def main():
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        writer = open_writer("runs/exp1")
        if writer is not None:
            writer.add_text("status", "started")
        for epoch in range(3):
            LOOP
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_what_a_guards_own_branch_assigns_does_not_decide_its_test(tmp_path):
    # Every rank enters `if writer is None:` (the branch's rank-0-only writer comes after the test).
    script = WRITER.replace("LOOP", "pass")
    assert _findings(tmp_path, {"train.py": script}, "DDP009") == set()


def test_a_loop_that_brings_the_branchs_value_back_to_the_test_keeps_it(tmp_path):
    # In a loop the ranks without a writer enter the branch again, and rank 0 skips the barrier.
    loop = ("if writer is None:\n"
            "                writer = SummaryWriter('runs') if dist.get_rank() == 0 else None\n"
            "                dist.barrier()")
    script = WRITER.replace("LOOP", loop)
    assert ("train.py", 24, "DDP009") in _findings(tmp_path, {"train.py": script}, "DDP009")
