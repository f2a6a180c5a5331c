"""An epoch loop that calls `set_epoch` on its sampler and then, further down the same pass,
builds a new sampler (and a loader from it), through `ddpcheck lint` (DDP002): the epoch goes
to the last pass's sampler, which is dropped, and each new one starts at epoch 0. Setting the
epoch after the rebuild is clean, and so is a dataset that calls its own `self.set_epoch(0)`
when it is made (its clips, not a sampler's order)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

DATA = """\
    import random

    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler


    class ClipDataset(Dataset):
        def __init__(self, videos, lengths):
            self.videos = videos
            self.lengths = lengths
            self.set_epoch(0)

        def set_epoch(self, epoch):
            self.length = self.lengths[min(epoch, len(self.lengths) - 1)]
            self.starts = [(v, s) for v in self.videos for s in range(0, 100, self.length)]

        def __len__(self):
            return len(self.starts)

        def __getitem__(self, i):
            return self.starts[i]


    def make_sampler(dataset, shuffle):
        if dist.is_initialized():
            return DistributedSampler(dataset, shuffle=shuffle)
        return RandomSampler(dataset)


    def make_loader(dataset, sampler, batch_size):
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    """

ENGINE = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import ClipDataset, make_loader, make_sampler


    def train(model, optimizer, videos, epochs):
        dataset = ClipDataset(videos, [2, 4, 8])
        sampler = make_sampler(dataset, shuffle=True)
        for epoch in range(epochs):
    BODY
            for batch in loader:
                optimizer.zero_grad()
                model(batch).sum().backward()
                optimizer.step()


    def main(videos):
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(4, 1).cuda())
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), videos, 10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main([])
    """

SET_THEN_REBUILD = """\
            if dist.is_initialized():
                sampler.set_epoch(epoch)
            dataset.set_epoch(epoch)
            sampler = make_sampler(dataset, shuffle=True)
            loader = make_loader(dataset, sampler, 8)"""

REBUILD_THEN_SET = """\
            dataset.set_epoch(epoch)
            sampler = make_sampler(dataset, shuffle=True)
            if dist.is_initialized():
                sampler.set_epoch(epoch)
            loader = make_loader(dataset, sampler, 8)"""


def _lint(tmp_path: Path, body: str) -> set[tuple[str, int, str]]:
    engine = ENGINE.replace("    BODY", body)
    write_project(tmp_path, {"data.py": DATA, "engine.py": engine})
    return finding_set(tmp_path, "engine.py", select="DDP002")


def test_set_epoch_on_the_sampler_a_rebuild_then_replaces_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, SET_THEN_REBUILD) == {("engine.py", 11, "DDP002")}


def test_set_epoch_after_the_rebuild_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, REBUILD_THEN_SET) == set()
