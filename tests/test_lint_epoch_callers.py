"""Loaders iterated in a method that an epoch or step loop elsewhere calls, through
`ddpcheck lint`: each pass of the caller's loop is an epoch of the loader."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

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
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", "DDP002", "--output-format", "json", str(script))
    assert r.returncode == 0, r.stderr
    return [(f["code"], f["location"]["line"]) for f in json.loads(r.stdout)["findings"]]


def test_an_epoch_method_over_the_trainers_loader_run_from_the_fit_loop(tmp_path):
    # Reported at the fit loop, where set_epoch goes.
    assert _lint(tmp_path, EPOCH_METHOD.format(set_epoch="")) == [("DDP002", 27)]


def test_an_epoch_method_with_set_epoch_in_the_fit_loop_stays_clean(tmp_path):
    methods = EPOCH_METHOD.format(set_epoch="self.sampler.set_epoch(epoch)\n            ")
    assert _lint(tmp_path, methods) == []


def test_restarting_the_loader_when_it_runs_out_is_a_new_epoch(tmp_path):
    assert _lint(tmp_path, RESTART_METHOD.format(set_epoch="")) == [("DDP002", 31)]


def test_a_loader_iterated_once_outside_any_loop_stays_clean(tmp_path):
    methods = """
    def fit(self, steps):
        for x, y in self.train_loader:
            self.step(x, y)
"""
    assert _lint(tmp_path, methods) == []
