"""Code of the single-process arm of an "is distributed" test, through `ddpcheck lint`: a trainer
that wraps its network only `if self.use_ddp and self.world_size > 1:` and, in its step, calls the
plain network in the `else` of the same test is training the model the run never wrapped (DDP013
stays silent); the same call in the distributed arm, on a model kept unwrapped, is reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_findings

TRAINER = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, net, loader, rank, world_size, use_ddp):
        self.rank = rank
        self.world_size = world_size
        self.use_ddp = use_ddp
        self.net = net.to(rank)
        self.model = self.net
        if self.use_ddp and self.world_size > 1:
            self.model = DDP(self.net, device_ids=[rank])
        self.loader = loader
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.001 * world_size)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                if self.use_ddp and self.world_size > 1:
                    out = {distributed}(x)
                else:
                    out = {single}(x)
                loss = torch.nn.functional.mse_loss(out, y)
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()


def worker(rank, world_size, net, loader):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    Trainer(net, loader, rank, world_size, use_ddp=True).fit(10)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, None, None), nprocs=2)
"""


def _findings(tmp_path: Path, distributed: str, single: str) -> list[tuple[str, int]]:
    (tmp_path / "train.py").write_text(TRAINER.format(distributed=distributed, single=single))
    return [(f["code"], f["location"]["line"]) for f in lint_findings(tmp_path, "train.py", select="DDP013")]


def test_plain_network_in_the_single_process_arm_is_silent(tmp_path: Path) -> None:
    # `self.model` is the plain network exactly when the test is false: no run trains it unwrapped.
    assert _findings(tmp_path, "self.model", "self.model") == []
    assert _findings(tmp_path, "self.model", "self.net") == []


def test_inner_network_in_the_distributed_arm_is_reported(tmp_path: Path) -> None:
    assert _findings(tmp_path, "self.net", "self.model") == [("DDP013", 23)]
