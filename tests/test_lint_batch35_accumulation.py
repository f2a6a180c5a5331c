"""Accumulation rules on mechanisms seen on public scripts of batch 35: each through `ddpcheck lint`
on a small project written in the style of the scripts, with a clean (or differently reported) variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A scaler helper that back-propagates on every call and steps only when `update_grad` says so.
SCALER = """\
    import torch


    class GradScalerStep:
        def __init__(self):
            self._scaler = torch.cuda.amp.GradScaler()

        def __call__(self, loss, optimizer, parameters=None, update_grad=True):
            self._scaler.scale(loss).backward()
            if update_grad:
                self._scaler.step(optimizer)
                self._scaler.update()
"""

# The loop accumulates on the arm of `if args.accum_steps > 1:`; the other arm passes the same
# counter test, which there holds on every iteration (the count is at most one).
LOOP = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from scaler import GradScalerStep

    parser = argparse.ArgumentParser()
    parser.add_argument("--accum-steps", type=int, default=1)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScalerStep()
    data = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4,
                                       sampler=torch.utils.data.DistributedSampler(torch.randn(64, 8)))

    for idx, x in enumerate(data):
        loss = model(x.cuda()).sum()
        if args.accum_steps > 1:
            loss = loss / args.accum_steps
            scaler(loss, optimizer, parameters=model.parameters(),
                   update_grad=(idx + 1) % args.accum_steps == 0)
            if (idx + 1) % args.accum_steps == 0:
                optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            scaler(loss, optimizer, parameters=model.parameters(),
                   update_grad=(idx + 1) % args.accum_steps == 0)
"""


def test_counter_whose_divisor_the_arm_holds_at_one_steps_every_iteration(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": LOOP, "scaler.py": SCALER}, "DDP016") == [("train.py", 27)]


def test_counter_on_an_arm_that_says_nothing_of_the_divisor_is_reported(tmp_path: Path) -> None:
    loop = LOOP.replace("    if args.accum_steps > 1:", "    if args.scale_loss:").replace(
        'parser.add_argument("--accum-steps", type=int, default=1)',
        'parser.add_argument("--accum-steps", type=int, default=1)\n    parser.add_argument("--scale-loss", type=int, default=1)')
    assert lines(tmp_path, {"train.py": loop, "scaler.py": SCALER}, "DDP016") == [("train.py", 28), ("train.py", 34)]


def test_divisor_held_at_one_by_an_equality_test(tmp_path: Path) -> None:
    loop = LOOP.replace("    if args.accum_steps > 1:", "    if args.accum_steps != 1:")
    assert lines(tmp_path, {"train.py": loop, "scaler.py": SCALER}, "DDP016") == [("train.py", 27)]
