"""`stop = True` and `break` side by side under one rank-local test, inside a `while not stop:`
around the epoch's batch loop, through `ddpcheck lint --select DDP035`: one pitfall (one test to
agree on), reported once, at the `break`. A flag set without a `break` is still reported at the
flag."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines

TRAIN = """\
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stop = False
    epoch = 0
    while not stop:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if not torch.isfinite(loss):
                stop = True
{BREAK}
        epoch += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_flag_and_break_under_one_test_are_reported_once_at_the_break(tmp_path: Path) -> None:
    files = {"train.py": TRAIN.replace("{BREAK}", "                break")}
    assert finding_lines(tmp_path, files, "DDP035") == [("train.py", 28)]


def test_a_flag_without_a_break_is_reported_at_the_flag(tmp_path: Path) -> None:
    files = {"train.py": TRAIN.replace("{BREAK}\n", "")}
    assert finding_lines(tmp_path, files, "DDP035") == [("train.py", 27)]
