"""Methods called on the module a DDP wrapper holds (`model.module.method(...)`), with the model
a module-level variable, through `ddpcheck lint`: the call graph resolves them to the inner
class's method, so every rule that asks what a call runs sees its layers."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_findings

NETS = """\
import torch


class SegNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(x)

    def compute_loss(self, x, y):
        return torch.nn.functional.cross_entropy(self.head(x), y)

    def clear_cache(self):
        self.cached = None


class Baseline(torch.nn.Module):
    def compute_loss(self, x, y):
        return (x.sum() - y.sum()).abs()
"""

SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from nets import SegNet

dist.init_process_group("nccl")
model = DDP(SegNet().cuda(), device_ids=[0])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
for epoch in range(10):
    for x, y in loader:
        model.module.clear_cache()
        loss = {loss}
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
dist.destroy_process_group()
"""


def _lint(tmp_path: Path, loss: str) -> list[tuple[str, int]]:
    (tmp_path / "nets.py").write_text(NETS)
    (tmp_path / "train.py").write_text(SCRIPT.format(loss=loss))
    return [(f["code"], f["location"]["line"]) for f in lint_findings(tmp_path, "train.py", select="DDP013")]


def test_the_inner_modules_loss_method_bypasses_the_wrapper(tmp_path):
    # Two classes define compute_loss: only the value flow tells which one runs.
    assert _lint(tmp_path, "model.module.compute_loss(x, y)") == [("DDP013", 12)]


def test_upkeep_on_the_inner_module_beside_the_wrapped_forward_stays_clean(tmp_path):
    assert _lint(tmp_path, "torch.nn.functional.cross_entropy(model(x), y)") == []
