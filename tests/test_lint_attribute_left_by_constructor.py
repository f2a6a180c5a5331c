"""What an attribute holds after the method that sets it returns, through `ddpcheck lint`
(DDP013): a base trainer that wraps its model in DDP and then keeps only the wrapped module
(`self.model = DDP(self.model)`, then `self.model = self.model.module`) leaves the plain model for
the subclass's training step, which then trains it without any all-reduce."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli

BASE = """\
    import torch
    import torch.distributed as dist
    from torch import nn


    class TrainerBase:
        def __init__(self, model, loader):
            self.gpu_id = dist.get_rank() % torch.cuda.device_count()
            self.loader = loader
            self.model = model.to(self.gpu_id)
            if torch.cuda.device_count() >= 2:
                self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
                self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[self.gpu_id])
                self.model = self.model.module
"""

TRAINER = """\
    import torch

    from base import TrainerBase


    class Trainer(TrainerBase):
        def __init__(self, model, loader, optimizer):
            super().__init__(model, loader)
            self.optimizer = optimizer

        def _run_batch(self, batch):
            self.optimizer.zero_grad()
            loss = self.model(**batch)
            loss.backward()
            self.optimizer.step()
            return loss.detach()

        def train(self, epochs):
            for epoch in range(epochs):
                self.loader.sampler.set_epoch(epoch)
                for batch in self.loader:
                    self._run_batch(batch)
"""

MAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from model import build_model, build_dataset
    from trainer import Trainer


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dataset = build_dataset()
        loader = DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset))
        model = build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        Trainer(model, loader, optimizer).train(100)
        dist.destroy_process_group()
"""

MODEL = """\
    import torch
    from torch import nn


    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 8))

        def forward(self, x, y):
            return nn.functional.mse_loss(self.net(x), y)


    def build_model():
        return Denoiser()


    def build_dataset():
        return [{"x": torch.randn(8), "y": torch.randn(8)} for _ in range(64)]
"""


def _found(root: Path, base: str = BASE) -> set[tuple[str, int]]:
    for name, text in {"main.py": MAIN, "base.py": base, "trainer.py": TRAINER, "model.py": MODEL}.items():
        (root / name).write_text(textwrap.dedent(text))
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", "DDP013", "--output-format", "json",
                "main.py", cwd=root)
    assert r.returncode == 0, r.stderr
    return {(Path(f["path"]).name, f["location"]["line"]) for f in json.loads(r.stdout)["findings"]}


def test_the_module_left_in_place_of_the_wrapper_is_trained_unreduced(tmp_path):
    line = 1 + [s.strip() for s in textwrap.dedent(TRAINER).splitlines()].index("loss = self.model(**batch)")
    assert _found(tmp_path) == {("trainer.py", line)}


def test_the_wrapper_kept_in_the_attribute_is_not_reported(tmp_path):
    kept = BASE.replace("                self.model = self.model.module\n", "")
    assert kept != BASE
    assert _found(tmp_path, kept) == set()
