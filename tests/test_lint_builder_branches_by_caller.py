"""A loader builder whose branch is chosen by its caller's argument (`make_loader(cfg, tag="train")`
and `if tag == "train":` inside): a loader built on a branch a caller's arguments rule out is not
what that caller binds. Through `ddpcheck lint` (DDP001) on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_loader(size, tag):
    dataset = TensorDataset(torch.randn(size, 8))
    if tag {test}:
        loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
    else:
        loader = DataLoader(dataset, batch_size=8)
    return loader


def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(8, 2).cuda())
    train_loader = make_loader(512, tag={train_tag})
    val_loader = make_loader(64, tag="val")
    for epoch in range(10):
        train_loader.sampler.set_epoch(epoch)
        for (x,) in train_loader:
            model(x.cuda()).sum().backward()
        with torch.no_grad():
            for (x,) in val_loader:
                model(x.cuda())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("test", "train_tag"), [
    ('== "train"', '"train"'),
    ('!= "val"', '"train"'),
    ('in ("train", "trainval")', '"trainval"'),
])
def test_the_training_call_takes_the_sharded_branch(tmp_path, test, train_tag):
    write_project(tmp_path, {"train.py": SCRIPT.format(test=test, train_tag=train_tag)})
    assert finding_set(tmp_path, "train.py", select="DDP001") == set()


def test_the_training_call_that_takes_the_unsharded_branch_is_reported(tmp_path):
    # The training call passes a tag the test does not accept: its loader is the unsharded one.
    write_project(tmp_path, {"train.py": SCRIPT.format(test='== "train"', train_tag='"training"')})
    assert finding_set(tmp_path, "train.py", select="DDP001") == {("train.py", 13, "DDP001")}
