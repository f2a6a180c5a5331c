"""`torch.compile` of the DDP wrapper forwards attribute reads to it: `compiled.module` is the
module inside DDP, and calling `compiled(x)` goes through DDP. Through `ddpcheck lint` (DDP013)
on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Diffusion(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.net(x)

    def get_loss(self, x):
        return self.net(x).pow(2).mean()


class Trainer:
    def __init__(self, loader):
        self.loader = loader

    def epoch(self, model, opt):
        for x in self.loader:
            loss = {loss}
            opt.zero_grad()
            loss.backward()
            opt.step()


def main():
    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    model = DDP(Diffusion().cuda(rank), device_ids=[rank])
    model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    Trainer([torch.randn(2, 4)]).epoch(model, opt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("loss", ["model.module.get_loss(x)", "model.module(x).pow(2).mean()"])
def test_the_inner_module_of_a_compiled_wrapper_is_reported(tmp_path, loss):
    write_project(tmp_path, {"train.py": SCRIPT.format(loss=loss)})
    assert finding_set(tmp_path, "train.py", select="DDP013") == {("train.py", 25, "DDP013")}


def test_calling_the_compiled_wrapper_goes_through_ddp(tmp_path):
    write_project(tmp_path, {"train.py": SCRIPT.format(loss="model(x).pow(2).mean()")})
    assert finding_set(tmp_path, "train.py", select="DDP013") == set()
