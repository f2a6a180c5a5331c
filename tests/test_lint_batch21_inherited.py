"""A base trainer's evaluation loop run on an instance of a project subclass (DDP036): the
subclass's constructor gives the instance a validation loader with a DistributedSampler after
the base's own single-process loader, and the inherited method reads that one. Each through
`ddpcheck lint` on a small project written in the style of public scripts, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAINERS = """\
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    class BasicTrainer:
        def __init__(self, device, model, train_set, val_set, epochs):
            self.device = device
            self.model = model.to(device)
            self.train_set = train_set
            self.val_set = val_set
            self.criterion = nn.CrossEntropyLoss()
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
            self.val_losses = torch.zeros(epochs)
            self.train_loader, self.val_loader = self.make_loaders()

        def make_loaders(self):
            train_loader = DataLoader(self.train_set, batch_size=16, shuffle=True)
            val_loader = DataLoader(self.val_set, batch_size=16)
            return train_loader, val_loader

        def run_epoch(self, epoch):
            self.model.train()
            for x, y in self.train_loader:
                self.optimizer.zero_grad()
                loss = self.criterion(self.model(x.to(self.device)), y.to(self.device))
                loss.backward()
                self.optimizer.step()
            self.model.eval()
            val_loss = 0.0
            with torch.no_grad():
                for x, y in self.val_loader:
                    val_loss += self.criterion(self.model(x.to(self.device)), y.to(self.device)).item()
            self.val_losses[epoch] = val_loss / len(self.val_loader)
            print(f"epoch {{epoch}} val loss {{val_loss / len(self.val_loader):.3f}}")

        def train(self, epochs):
            for epoch in range(epochs):
                self.run_epoch(epoch)


    class DistributedTrainer(BasicTrainer):
        def __init__(self, rank, model, train_set, val_set, epochs):
            {before}
            super().__init__(rank, model, train_set, val_set, epochs)
            {after}
            torch.cuda.set_device(rank)
            self.model = DDP(self.model, device_ids=[rank])

        def make_ddp_loaders(self):
            self.sampler = DistributedSampler(self.train_set)
            train_loader = DataLoader(self.train_set, batch_size=16, sampler=self.sampler)
            val_loader = DataLoader(self.val_set, batch_size=16, sampler=DistributedSampler(self.val_set, shuffle=False))
            return train_loader, val_loader

        def train(self, epochs):
            for epoch in range(epochs):
                self.sampler.set_epoch(epoch)
                self.run_epoch(epoch)
"""

SCRIPT = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from trainers import {made}


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        train_set = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        val_set = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
        trainer = {made}(rank, torch.nn.Linear(8, 2), train_set, val_set, 5)
        trainer.train(5)
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
"""

ASSIGN = "self.train_loader, self.val_loader = self.make_ddp_loaders()"


def project(made: str, before: str = "pass", after: str = "pass") -> dict[str, str]:
    return {"trainers.py": TRAINERS.format(before=before, after=after), "train.py": SCRIPT.format(made=made)}


def test_inherited_loop_reads_the_subclass_loader(tmp_path: Path) -> None:
    # The subclass's constructor replaces the base's loaders after `super().__init__(...)`:
    # the base's `run_epoch` walks one rank's shard and prints its own loss.
    assert lines(tmp_path, project("DistributedTrainer", after=ASSIGN), "DDP036") == [("trainers.py", 37)]


def test_subclass_loader_replaced_by_the_base_constructor_is_silent(tmp_path: Path) -> None:
    # Set before `super().__init__(...)`, which makes the single-process loaders again.
    assert lines(tmp_path, project("DistributedTrainer", before=ASSIGN), "DDP036") == []


def test_subclass_never_built_is_silent(tmp_path: Path) -> None:
    # Only the base trainer is built: its loop walks the whole validation set.
    assert lines(tmp_path, project("BasicTrainer", after=ASSIGN), "DDP036") == []
