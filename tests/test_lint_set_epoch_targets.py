"""Which `set_epoch` counts and which loop repeats the order, through `ddpcheck lint`: a
dataset's own `set_epoch` (for its augmentation or crops) is not the sampler's; a loader rebuilt
per data file inside the epoch loop repeats its order on every epoch."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

DATASET = """\
import random

import torch
import torch.utils.data


class CropDataset(torch.utils.data.Dataset):
    def __init__(self, items, cropsize=256):
        self.items = items
        self.cropsize = cropsize
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch
{extra}
    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        rng = random.Random(self.epoch * len(self.items) + idx)
        start = rng.randint(0, 16)
        return self.items[idx][start:start + self.cropsize]
"""

TRAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from data.crops import CropDataset


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    train_set = CropDataset([torch.randn(300) for _ in range(64)])
    sampler = torch.utils.data.DistributedSampler(train_set)
    loader = torch.utils.data.DataLoader(train_set, batch_size=8, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Linear(256, 1).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    for epoch in range(10):
        {set_epoch}
        for x in loader:
            loss = model(x.cuda()).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _lint(tmp_path: Path, set_epoch: str, extra: str = "") -> list[tuple[str, int]]:
    files = {"data/__init__.py": "", "data/crops.py": DATASET.replace("{extra}", extra),
             "train.py": TRAIN.replace("{set_epoch}", set_epoch)}
    return [(f["code"], f["location"]["line"]) for f in lint_project(tmp_path, files, "train.py", select="DDP002")]


def test_only_the_datasets_set_epoch_through_the_loader_is_reported(tmp_path):
    assert _lint(tmp_path, "loader.dataset.set_epoch(epoch)") == [("DDP002", 19)]


def test_only_the_datasets_set_epoch_by_its_name_is_reported(tmp_path):
    assert _lint(tmp_path, "train_set.set_epoch(epoch)") == [("DDP002", 19)]


def test_the_samplers_set_epoch_besides_the_datasets_stays_clean(tmp_path):
    assert _lint(tmp_path, "loader.dataset.set_epoch(epoch); sampler.set_epoch(epoch)") == []


def test_the_samplers_set_epoch_through_the_loader_stays_clean(tmp_path):
    assert _lint(tmp_path, "loader.sampler.set_epoch(epoch)") == []


def test_a_dataset_that_passes_the_epoch_on_stays_clean(tmp_path):
    # The dataset's set_epoch hands the epoch to a sampler it holds: the model cannot tell which.
    extra = """
    def attach(self, sampler):
        self.sampler = sampler

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.sampler.set_epoch(epoch)
"""
    assert _lint(tmp_path, "loader.dataset.set_epoch(epoch)", extra) == []


SHARDS = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from data.files import load_shard, make_loader


def main(args):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    files = sorted(os.listdir(args.data_dir))
    model = DistributedDataParallel(torch.nn.Linear(16, 1).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    {outer}
        for file_idx in range(len(files)):
            shard = load_shard(files[file_idx])
            {split}
            loader = make_loader(train_part, 32)
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
    dist.destroy_process_group()
"""

FILES = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def load_shard(path):
    data = torch.load(path)
    return TensorDataset(data["x"], data["y"])


def make_loader(dataset, batch_size):
    sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
"""


def _lint_shards(tmp_path: Path, outer: str, split: str) -> list[tuple[str, int]]:
    files = {"data/__init__.py": "", "data/files.py": FILES,
             "train.py": SHARDS.replace("{outer}", outer).replace("{split}", split)}
    return [(f["code"], f["location"]["line"]) for f in lint_project(tmp_path, files, "train.py", select="DDP002")]


def test_a_loader_rebuilt_per_file_repeats_its_order_each_epoch(tmp_path):
    # The file loop gives each pass its own data; the epoch loop around it repeats them all.
    found = _lint_shards(tmp_path, "for epoch in range(args.epochs):", "train_part = shard")
    assert found == [("DDP002", 17)]


def test_a_loader_rebuilt_per_file_through_a_split_repeats_its_order_each_epoch(tmp_path):
    split = "train_part, _ = torch.utils.data.random_split(shard, [0.9, 0.1])"
    assert _lint_shards(tmp_path, "for epoch in range(args.epochs):", split) == [("DDP002", 17)]


def test_one_pass_over_the_files_stays_clean(tmp_path):
    # Each file is read once: no epoch repeats an order.
    assert _lint_shards(tmp_path, "if True:", "train_part = shard") == []
