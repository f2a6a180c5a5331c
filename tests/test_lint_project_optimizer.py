"""An optimizer class of the project's own (`class Lars(Optimizer)`) is an optimizer to the
rules: its constant learning rate is reported as torch's are (DDP004), through a builder
function and a spawned worker, and a rate scaled by the world size stays clean."""

from __future__ import annotations

from tests.helpers import finding_lines as lines

LARS = """\
import torch
from torch.optim.optimizer import Optimizer


def build_lars(model, lr, momentum=0.9):
    return Lars(model.parameters(), lr=lr, momentum=momentum)


class Lars(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
"""

TRAIN = """\
import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from lars import build_lars


def main(rank, args):
    dist.init_process_group("nccl", rank=rank, world_size=args.world_size)
    torch.cuda.set_device(rank)
    model = DDP(torch.nn.Linear(8, 2).cuda(rank), device_ids=[rank])
    optimizer = build_lars(model, lr=args.lr)
    for x in range(10):
        optimizer.zero_grad()
        model(torch.randn(4, 8).cuda(rank)).sum().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args()
    args.world_size = args.gpus
    args.lr = {rate}
    mp.spawn(main, nprocs=args.gpus, args=(args,))
"""


def test_a_constant_rate_given_to_a_project_optimizer_class_is_reported(tmp_path):
    files = {"lars.py": LARS, "train.py": TRAIN.format(rate="1.0")}
    assert lines(tmp_path, files, "DDP004") == [("train.py", 26)]


def test_a_rate_scaled_by_the_world_size_is_clean(tmp_path):
    files = {"lars.py": LARS, "train.py": TRAIN.format(rate="0.3 * args.world_size")}
    assert lines(tmp_path, files, "DDP004") == []


def test_a_project_class_that_is_not_an_optimizer_is_not_one(tmp_path):
    # The same class without the torch base: a schedule or a wrapper, not an optimizer.
    lars = LARS.replace("class Lars(Optimizer):", "class Lars:").replace(
        "        super().__init__(params, dict(lr=lr, momentum=momentum))", "        self.param_groups = []")
    files = {"lars.py": lars, "train.py": TRAIN.format(rate="1.0")}
    assert lines(tmp_path, files, "DDP004") == []
