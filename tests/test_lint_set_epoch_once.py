"""A `set_epoch` that runs once, before the epoch loop, sets one epoch: every later epoch replays
its order (DDP002). Through `ddpcheck lint` on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train_epoch(model, loader):
    for (x,) in loader:
        model(x).sum().backward()


def main(start_epoch, epochs):
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4))
    sampler = DistributedSampler(data)
    {before}
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 4))
    for epoch in range(start_epoch, epochs):
        {inside}
        train_epoch(model, loader)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(0, 10)
"""


def _found(tmp_path, before, inside):
    write_project(tmp_path, {"train.py": SCRIPT.format(before=before, inside=inside)})
    return finding_set(tmp_path, "train.py", select="DDP002")


def test_set_epoch_once_before_the_loop_is_reported_at_the_loop(tmp_path):
    assert _found(tmp_path, "sampler.set_epoch(start_epoch)", "pass") == {("train.py", 19, "DDP002")}


@pytest.mark.parametrize(("before", "inside"), [
    ("pass", "sampler.set_epoch(epoch)"),
    ("sampler.set_epoch(start_epoch)", "sampler.set_epoch(epoch)"),
    ("sampler.set_epoch(start_epoch)", "loader.sampler.set_epoch(epoch)"),
])
def test_set_epoch_in_the_loop_is_clean(tmp_path, before, inside):
    assert _found(tmp_path, before, inside) == set()
