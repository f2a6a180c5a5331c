"""A rank-0 forward of a DDP wrapper under `torch.no_grad()` that follows, on its process, another
no_grad forward of the same wrapper, through `ddpcheck lint` (DDP009): DDP broadcasts buffers only
while `require_forward_param_sync` holds, which a forward with gradients off clears, so after the
every-rank validation at the end of training a rank-0 test pass sends nothing. A training forward,
or a validation that only some epochs run, as the last forward before it still makes it a
broadcast the other ranks never join."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_findings

NET = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))
"""

TRAINER = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from net import Net


class Trainer:
    def __init__(self, rank, world_size, loaders):
        self.rank = rank
        self.model = DDP(Net().to(rank), device_ids=[rank])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01 * world_size)
        self.train_loader, self.val_loader, self.test_loader = loaders

    def train(self, epochs):
        for epoch in range(epochs):
            self.model.train()
            for x, y in self.train_loader:
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
{validation}

    def validate(self):
        self.model.eval()
        with torch.no_grad():
            for x, y in self.val_loader:
                self.model(x)

    def test(self):
        if self.rank != 0:
            return
        self.model.eval()
        with torch.no_grad():
            for x, y in self.test_loader:
                out = self.model(x)
                print((out.argmax(1) == y).float().mean().item())


def worker(rank, world_size, loaders):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    trainer = Trainer(rank, world_size, loaders)
    trainer.train(10)
    if rank == 0:
        trainer.test()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, None), nprocs=2)
"""

EVERY_EPOCH = """\
            self.model.eval()
            with torch.no_grad():
                for x, y in self.val_loader:
                    self.model(x)"""

SOME_EPOCHS = """\
            if epoch % 5 == 0:
                self.validate()"""


def _findings(tmp_path: Path, validation: str) -> list[tuple[str, int]]:
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "train.py").write_text(TRAINER.format(validation=validation))
    return [(f["code"], f["location"]["line"]) for f in lint_findings(tmp_path, "train.py", select="DDP009")]


def test_rank_zero_test_after_every_rank_validation_is_silent(tmp_path: Path) -> None:
    assert _findings(tmp_path, EVERY_EPOCH) == []
    # The validation in a method of its own, called every epoch: the same last forward.
    assert _findings(tmp_path, "            self.validate()") == []


def test_rank_zero_test_after_a_training_forward_is_reported(tmp_path: Path) -> None:
    assert _findings(tmp_path, "            pass") == [("DDP009", 37)]


def test_rank_zero_test_after_a_validation_some_epochs_skip_is_reported(tmp_path: Path) -> None:
    assert _findings(tmp_path, SOME_EPOCHS) == [("DDP009", 38)]


SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from net import Net

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = DDP(Net().cuda(), device_ids=[rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
for epoch in range(10):
{steps}
    if rank == 0:
        with torch.no_grad():
            print(model(sample).sum().item())
dist.destroy_process_group()
"""

TRAIN = """\
    for x, y in train_loader:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()"""

VALIDATE = """\
    with torch.no_grad():
        for x, y in val_loader:
            model(x)"""


def _script(tmp_path: Path, steps: str) -> list[tuple[str, int]]:
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "train.py").write_text(SCRIPT.format(steps=steps))
    return [(f["code"], f["location"]["line"]) for f in lint_findings(tmp_path, "train.py", select="DDP009")]


def test_rank_zero_forward_after_the_epochs_validation_is_silent(tmp_path: Path) -> None:
    assert _script(tmp_path, f"{TRAIN}\n{VALIDATE}") == []


def test_rank_zero_forward_after_the_epochs_training_is_reported(tmp_path: Path) -> None:
    # Validation first, training last: the rank-0 forward is the first after a training one.
    assert _script(tmp_path, f"{VALIDATE}\n{TRAIN}") == [("DDP009", 21)]
