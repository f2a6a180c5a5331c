"""`x if name is None else y` where every binding of a local name decides the test: the arm that
cannot run adds no value. Through `ddpcheck lint` (DDP006, shuffle with a sampler) on small
projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(args):
    dist.init_process_group("nccl")
    dataset = TensorDataset(torch.randn(64, 8))
    {sampler}
    loader = DataLoader(dataset, batch_size=8,
                        shuffle={shuffle},
                        sampler=sampler)
    model = DDP(torch.nn.Linear(8, 2).cuda())
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            model(x.cuda()).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(None)
"""


def _found(tmp_path, sampler, shuffle):
    write_project(tmp_path, {"train.py": SCRIPT.format(sampler=sampler, shuffle=shuffle)})
    return finding_set(tmp_path, "train.py", select="DDP006")


@pytest.mark.parametrize("shuffle", [
    "True if sampler is None else False",
    "False if sampler is not None else True",
    "(sampler is None) and True if sampler is None else False",
    "False if sampler else True",
    "not sampler",
])
def test_shuffle_off_whenever_the_sampler_is_built_is_clean(tmp_path, shuffle):
    assert _found(tmp_path, "sampler = DistributedSampler(dataset)", shuffle) == set()


def test_shuffle_on_whenever_the_sampler_is_built_is_reported(tmp_path):
    found = _found(tmp_path, "sampler = DistributedSampler(dataset)", "True if sampler is not None else False")
    assert found == {("train.py", 13, "DDP006")}


def test_shuffle_on_when_the_sampler_is_there_is_reported(tmp_path):
    # Tested alone, the sampler is tested for presence: it is there, so shuffle is on.
    found = _found(tmp_path, "sampler = DistributedSampler(dataset)", "True if sampler else False")
    assert found == {("train.py", 13, "DDP006")}


def test_a_sampler_that_may_be_none_leaves_both_arms(tmp_path):
    # Built only when distributed: on that path the sampler is there and shuffle is off.
    sampler = "sampler = DistributedSampler(dataset) if dist.is_initialized() else None"
    assert _found(tmp_path, sampler, "True if sampler is None else False") == set()
