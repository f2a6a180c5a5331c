"""Loaders iterated in a method that an epoch or step loop elsewhere calls, through
`ddpcheck lint`: each pass of the caller's loop is an epoch of the loader."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_findings

TRAINER = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, dataset, local_rank):
        self.sampler = DistributedSampler(dataset)
        self.train_loader = DataLoader(dataset, batch_size=32, sampler=self.sampler)
        self.batches = iter(self.train_loader)
        net = torch.nn.Linear(8, 1).cuda()
        self.model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local_rank])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01 * dist.get_world_size())

    def step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
{methods}

def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dataset = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
    Trainer(dataset, local_rank).fit(100)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

EPOCH_METHOD = """
    def train_epoch(self):
        for x, y in self.train_loader:
            self.step(x, y)

    def fit(self, epochs):
        for epoch in range(epochs):
            {set_epoch}self.train_epoch()
"""

RESTART_METHOD = """
    def next_batch(self):
        try:
            return next(self.batches)
        except StopIteration:
            # Out of data: start the next epoch.
            self.batches = iter(self.train_loader)
            return next(self.batches)

    def fit(self, steps):
        for it in range(steps):
            {set_epoch}self.step(*self.next_batch())
"""


def _lint(tmp_path: Path, methods: str) -> list[tuple[str, int]]:
    script = tmp_path / "train.py"
    script.write_text(TRAINER.replace("{methods}", methods))
    return [(f["code"], f["location"]["line"]) for f in lint_findings(tmp_path, "train.py", select="DDP002")]


def test_an_epoch_method_over_the_trainers_loader_run_from_the_fit_loop(tmp_path):
    # Reported at the fit loop, where set_epoch goes.
    assert _lint(tmp_path, EPOCH_METHOD.format(set_epoch="")) == [("DDP002", 27)]


def test_an_epoch_method_with_set_epoch_in_the_fit_loop_stays_clean(tmp_path):
    methods = EPOCH_METHOD.format(set_epoch="self.sampler.set_epoch(epoch)\n            ")
    assert _lint(tmp_path, methods) == []


def test_restarting_the_loader_when_it_runs_out_is_a_new_epoch(tmp_path):
    # Reported at the restart: the step loop is no epoch loop, each restart begins an epoch.
    assert _lint(tmp_path, RESTART_METHOD.format(set_epoch="")) == [("DDP002", 27)]


def test_a_loader_iterated_once_outside_any_loop_stays_clean(tmp_path):
    methods = """
    def fit(self, steps):
        for x, y in self.train_loader:
            self.step(x, y)
"""
    assert _lint(tmp_path, methods) == []


ENHANCER_TRAINER = """\
import torch
import torch.distributed as dist


class Enhancer:
    def __init__(self, net, optimizer, train_loader):
        self.net = net
        self.optimizer = optimizer
        self.train_loader = train_loader

    def run_epoch(self, epoch):
        for noisy, clean in self.train_loader:
            self.optimizer.zero_grad()
            torch.nn.functional.mse_loss(self.net(noisy), clean).backward()
            self.optimizer.step()

    def fit(self, epochs):
        for epoch in range(epochs):
            dist.barrier()
            self.run_epoch(epoch)
"""

ENHANCER_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from trainer import Enhancer


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 16), torch.randn(64, 16))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    net = DDP(torch.nn.Linear(16, 16))
    enhancer = Enhancer(net, torch.optim.Adam(net.parameters()), loader)
    for epoch in range(int(os.environ.get("EPOCHS", 20))):
        SET
        enhancer.run_epoch(epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _set_epoch_findings(tmp_path: Path, script: str) -> list[tuple[str, int]]:
    (tmp_path / "trainer.py").write_text(ENHANCER_TRAINER)
    (tmp_path / "train.py").write_text(script)
    return [(Path(f["path"]).name, f["location"]["line"]) for f in lint_findings(tmp_path, "train.py", select="DDP002")]


def test_the_epoch_loop_is_the_scripts_own_not_an_unused_fit_loop_of_the_trainer(tmp_path):
    assert _set_epoch_findings(tmp_path, ENHANCER_SCRIPT.replace("SET", "pass")) == [("train.py", 17)]
    assert _set_epoch_findings(tmp_path, ENHANCER_SCRIPT.replace("SET", "sampler.set_epoch(epoch)")) == []
    # The script runs the trainer's own loop: that is where set_epoch goes.
    script = ENHANCER_SCRIPT.replace('    for epoch in range(int(os.environ.get("EPOCHS", 20))):\n'
                                     "        SET\n        enhancer.run_epoch(epoch)\n", "    enhancer.fit(20)\n")
    assert "fit(20)" in script
    assert _set_epoch_findings(tmp_path, script) == [("trainer.py", 18)]
