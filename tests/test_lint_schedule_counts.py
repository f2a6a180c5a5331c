"""A schedule handed the optimizer with a count of steps is not a scale of the rate, through
`ddpcheck lint`: the count depends on the world size through the loader's sampler, the rate does
not."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

TRAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from sched import cosine_lr


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    lr = {lr}
    n_epochs = 50
    dataset = TensorDataset(torch.randn(1024, 8), torch.randn(1024, 1))
    sampler = DistributedSampler(dataset, num_replicas=world_size)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    {total}
    schedule = cosine_lr(optimizer, lr, 500, {passed})
    for epoch in range(n_epochs):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            schedule(epoch * len(loader) + i)
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

SCHED = """\
import math


def cosine_lr(optimizer, base_lr, warmup_length, steps):
    def _adjust(step):
        if step < warmup_length:
            lr = base_lr * (step + 1) / warmup_length
        else:
            e = step - warmup_length
            lr = 0.5 * (1 + math.cos(math.pi * e / (steps - warmup_length))) * base_lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr
    return _adjust
"""


def _lint(tmp_path: Path, lr: str, total: str, passed: str) -> list[tuple[str, int]]:
    files = {"sched.py": SCHED, "train.py": TRAIN.format(lr=lr, total=total, passed=passed)}
    return [(f["code"], f["location"]["line"]) for f in lint_project(tmp_path, files, "train.py", select="DDP004")]


def test_a_step_count_by_its_name_does_not_scale_the_rate(tmp_path):
    found = _lint(tmp_path, "3e-4", "total_steps = len(loader) * n_epochs", "total_steps")
    assert found == [("DDP004", 22)]


def test_a_step_count_computed_in_place_does_not_scale_the_rate(tmp_path):
    assert _lint(tmp_path, "3e-4", "", "len(loader) * n_epochs") == [("DDP004", 22)]


def test_a_rate_scaled_by_the_world_size_stays_clean(tmp_path):
    assert _lint(tmp_path, "3e-4 * world_size", "total_steps = len(loader) * n_epochs", "total_steps") == []


def test_what_the_schedule_takes_as_its_step_count_is_a_count_whatever_the_callers_name(tmp_path):
    # The fourth parameter is `steps`: a value computed from the world size and handed there is
    # the schedule's length (the batches per rank shrink with more ranks), not a scale of the rate.
    assert _lint(tmp_path, "3e-4", "factor = world_size * 4 / 256", "factor") == [("DDP004", 22)]
