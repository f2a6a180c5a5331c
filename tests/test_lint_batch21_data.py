"""Data-loading rules on mechanisms seen on public scripts of batch 21: an epoch counter that is
the loop's own target (DDP002), a torch.distributed stand-in imported in its place (DDP018,
DDP005), and a DistributedSampler subclass that evens nothing out (DDP018, DDP034). Each through
`ddpcheck lint` on a small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, target, select=select))


# A d2l-style trainer whose epoch loop binds `self.epoch` itself; the epoch's method hands it to
# the sampler.
TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, max_epochs, rank):
            self.max_epochs = max_epochs
            self.rank = rank

        def fit(self, model, data):
            self.model = DistributedDataParallel(model.to(self.rank), device_ids=[self.rank])
            self.optim = torch.optim.Adam(self.model.parameters(), lr=0.002)
            self.train_dataloader = DataLoader(data, batch_size=64, shuffle=False,
                                               sampler=DistributedSampler(data, drop_last=True))
            self.epoch = 0
            {loop}
                self.fit_epoch()

        def fit_epoch(self):
            self.model.train()
            self.train_dataloader.sampler.set_epoch(self.epoch)
            for x, y in self.train_dataloader:
                self.optim.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optim.step()


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        Trainer(20, rank).fit(torch.nn.Linear(8, 1), make_data())
        dist.destroy_process_group()


    if __name__ == "__main__":
        torch.multiprocessing.spawn(worker, args=(2,), nprocs=2)
"""


def test_epoch_attribute_bound_by_the_epoch_loop_is_clean(tmp_path: Path) -> None:
    files = {"train.py": TRAINER.format(loop="for self.epoch in range(self.max_epochs):")}
    assert lines(tmp_path, files, "DDP002") == []


def test_epoch_attribute_never_advanced_is_reported(tmp_path: Path) -> None:
    # The loop counts with its own name; `self.epoch` stays 0: the same order every epoch.
    files = {"train.py": TRAINER.format(loop="for epoch in range(self.max_epochs):")}
    assert lines(tmp_path, files, "DDP002") == [("train.py", 24)]


# A loader builder for both splits and a script that reduces the evaluation's loss sums to rank 0,
# with torch.distributed or HFAI's drop-in replacement for it.
BUILDER = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def get_dataloader(name, batch_size, mode="train"):
        data = SeriesSet(name, split=mode)
        datasampler = DistributedSampler(data, shuffle=True{drop})
        return DataLoader(data, batch_size=batch_size, sampler=datasampler)
"""

REDUCING_SCRIPT = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel
    import {dist} as dist
    from data import get_dataloader


    def evaluate(model, criterion, eval_loader):
        loss, total = torch.zeros(2).cuda()
        model.eval()
        with torch.no_grad():
            for x, y in eval_loader:
                loss += criterion(model(x.cuda()), y.cuda())
                total += y.size(0)
        for t in [loss, total]:
            dist.reduce(t, 0)
        return loss.item() / total.item()


    def main(local_rank, world_size):
        dist.init_process_group(backend="nccl", init_method="env://", world_size=world_size, rank=local_rank)
        torch.cuda.set_device(local_rank)
        train_loader = get_dataloader("ETTh1", 32, mode="train")
        val_loader = get_dataloader("ETTh1", 32, mode="val")
        model = DistributedDataParallel(Net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        criterion = torch.nn.MSELoss()
        for epoch in range(10):
            train_loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                criterion(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            print(evaluate(model, criterion, val_loader))


    if __name__ == "__main__":
        torch.multiprocessing.spawn(main, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
"""


def test_stand_in_distributed_module_reduces_a_padded_evaluation(tmp_path: Path) -> None:
    files = {"data.py": BUILDER.format(drop=""), "train.py": REDUCING_SCRIPT.format(dist="hfai.nccl.distributed")}
    assert lines(tmp_path, files, "DDP018") == [("data.py", 7)]


def test_stand_in_distributed_module_init_without_destroy(tmp_path: Path) -> None:
    files = {"data.py": BUILDER.format(drop=""), "train.py": REDUCING_SCRIPT.format(dist="hfai.nccl.distributed")}
    assert lines(tmp_path, files, "DDP005") == [("train.py", 20)]


def test_stand_in_distributed_module_dropping_sampler_is_clean(tmp_path: Path) -> None:
    files = {"data.py": BUILDER.format(drop=", drop_last=True"),
             "train.py": REDUCING_SCRIPT.format(dist="hfai.nccl.distributed")}
    assert lines(tmp_path, files, "DDP018") == []


def test_unknown_distributed_module_is_not_read_as_torch(tmp_path: Path) -> None:
    # A module the model does not know stays unknown: nothing is claimed from its calls.
    files = {"data.py": BUILDER.format(drop=""), "train.py": REDUCING_SCRIPT.format(dist="mycluster.comm")}
    assert lines(tmp_path, files, "DDP018,DDP005") == []
