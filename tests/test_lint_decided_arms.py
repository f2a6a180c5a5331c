"""Values chosen in an arm of `a if test else b` that the code around them decides, through
`ddpcheck lint`: each test writes a small project in the style of real training code, the clean
variants, and a variant still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


GAN_TRAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def worker(rank, world_size, args, dataset):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=args.batch,
                            shuffle=True if sampler is None else False,
                            sampler=sampler, drop_last=True)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for batch in loader:
                pass
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch", type=int, default=8)
        parser.add_argument("--epochs", type=int, default=2)
        args = parser.parse_args()
        mp.spawn(worker, args=(2, args, list(range(100))), nprocs=2)
"""

LOADER_CLASS = """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    class Loaders:
        def __init__(self, train_set, batch_size):
            self.sampler = DistributedSampler(train_set, num_replicas=dist.get_world_size(),
                                              rank=dist.get_rank())
            self.train = DataLoader(train_set, batch_size=batch_size,
                                    shuffle=False if self.sampler is not None else True, sampler=self.sampler)
"""

LOADER_MAIN = """\
    import torch.distributed as dist
    from data.loaders import Loaders


    def main():
        dist.init_process_group("nccl")
        loaders = Loaders(list(range(64)), 4)
        for epoch in range(3):
            loaders.sampler.set_epoch(epoch)
            for batch in loaders.train:
                pass
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_shuffle_arm_decided_by_the_sampler_test_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": GAN_TRAIN}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == []
    # The test spelled the other way round, the arms swapped.
    swapped = GAN_TRAIN.replace("True if sampler is None else False", "False if sampler is not None else True")
    findings = lint_project(tmp_path, {"train.py": swapped}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == []
    # A sampler kept on the object, the loader built in a class of another module.
    files = {"data/__init__.py": "", "data/loaders.py": LOADER_CLASS, "main.py": LOADER_MAIN}
    findings = lint_project(tmp_path, files, "main.py", select="DDP006")
    assert _lines(findings, "DDP006") == []


def test_shuffle_arm_the_sampler_does_not_decide_is_still_reported(tmp_path: Path) -> None:
    # The test reads a flag, not the sampler: with --shuffle the loader gets both.
    flagged = GAN_TRAIN.replace("True if sampler is None else False", "True if args.shuffle else False").replace(
        '    args = parser.parse_args()', '    parser.add_argument("--shuffle", action="store_true")\n'
        '        args = parser.parse_args()')
    findings = lint_project(tmp_path, {"train.py": flagged}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == [14]
    # The sampler is None on the path without distribution: its arm shuffles, and no sampler is passed.
    optional = GAN_TRAIN.replace("sampler = DistributedSampler(dataset)",
                                 "sampler = DistributedSampler(dataset) if world_size > 1 else None").replace(
        "sampler.set_epoch(epoch)", "if sampler is not None:\n                sampler.set_epoch(epoch)")
    findings = lint_project(tmp_path, {"train.py": optional}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == []
