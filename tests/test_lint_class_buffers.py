"""Whether a DDP model's forward broadcasts buffers is read from the code of the model's class, not
from everything its file defines, through `ddpcheck lint`: a rank-0 evaluation of an encoder that
holds no buffers is silent even when the same file defines a BatchNorm head it does not use."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


MODELS = """\
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.norm = nn.LayerNorm(dim)

        def forward(self, x):
            return self.norm(torch.relu(self.proj(x)))


    class Encoder(nn.Module):
        def __init__(self, dim, depth):
            super().__init__()
            self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x


    class ProbeHead(nn.Module):
        def __init__(self, dim, classes):
            super().__init__()
            self.bn = nn.BatchNorm1d(dim)
            self.fc = nn.Linear(dim, classes)

        def forward(self, x):
            return self.fc(self.bn(x))
"""

TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net.models import Encoder


    def validate(model, batches):
        model.eval()
        with torch.no_grad():
            return sum(model(x).sum().item() for x in batches)


    def run(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(Encoder(32, 4).to(rank), device_ids=[rank])
        batches = [torch.randn(8, 32, device=rank) for _ in range(4)]
        for epoch in range(2):
            model(batches[0]).sum().backward()
            if rank == 0:
                print(validate(model, batches))
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(run, args=(2,), nprocs=2)
"""


def _files(models: str = MODELS, train: str = TRAIN) -> dict[str, str]:
    return {"net/__init__.py": "", "net/models.py": models, "train.py": train}


def test_rank_zero_forward_of_a_class_without_buffers_is_silent(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, _files(), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # The network built inside a trainer class's method.
    method = TRAIN.replace("            if rank == 0:\n                print(validate(model, batches))",
                           "            Reporter(model).maybe_report(rank, batches)").replace(
        "def run(rank", "class Reporter:\n        def __init__(self, model):\n            self.model = model\n\n"
        "        def maybe_report(self, rank, batches):\n            if rank == 0:\n"
        "                print(validate(self.model, batches))\n\n\n    def run(rank")
    findings = lint_project(tmp_path, _files(train=method), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []


def test_buffers_the_class_reaches_are_still_reported(tmp_path: Path) -> None:
    # The encoder builds the head: its forward broadcasts the head's running statistics.
    with_head = MODELS.replace("self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])",
                               "self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])\n"
                               "            self.head = ProbeHead(dim, 10)")
    findings = lint_project(tmp_path, _files(models=with_head), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [23]
    # A block the encoder uses holds the BatchNorm.
    bn_block = MODELS.replace("nn.LayerNorm(dim)", "nn.BatchNorm1d(dim)")
    findings = lint_project(tmp_path, _files(models=bn_block), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [23]
    # Its base class registers a buffer.
    based = MODELS.replace("class Encoder(nn.Module):", "class Base(nn.Module):\n"
                           "        def __init__(self):\n            super().__init__()\n"
                           "            self.register_buffer(\"steps\", torch.zeros(1))\n\n\n"
                           "    class Encoder(Base):")
    findings = lint_project(tmp_path, _files(models=based), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [23]
