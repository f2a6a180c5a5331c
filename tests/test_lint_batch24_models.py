"""The same torch seed on every rank (DDP029), on mechanisms seen on public scripts of batch 24:
a seed in the launcher before a spawn that only a distributed flag selects, a later per-rank seed
in the worker a project function spawns, and a seed a project module sets when it is imported.
Each through `ddpcheck lint` on a small project written in the style of the scripts, with a
clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# The launcher seeds, then spawns the workers when asked to run distributed, or calls the worker
# itself in this one process otherwise.
SPAWN_ON_FLAG = """\
    import argparse
    import os
    import random

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import transforms

    from data import PatchSet


    def worker(gpu, args):
        if args.distributed:
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "23456"
            dist.init_process_group("nccl", rank=gpu, world_size=args.world_size)
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1)).to(gpu)
        dataset = PatchSet(args.root, transforms.RandomCrop(64))
        sampler = None
        if args.distributed:
            net = DDP(net, device_ids=[gpu])
            sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=16, shuffle=(sampler is None), sampler=sampler, num_workers=4)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
        for low, high in loader:
            loss = (net(low.to(gpu)) - high.to(gpu)).abs().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--root", default="data")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--gpu", type=int, default=0)
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        random.seed(args.seed)
        torch.manual_seed(args.seed)
        {launch}
"""

SPAWN_ON_FLAG_ELSE = """\
if args.distributed:
            args.world_size = torch.cuda.device_count()
            mp.spawn(worker, nprocs=args.world_size, args=(args,))
        else:
            worker(args.gpu, args)"""

DATA = """\
    from torch.utils.data import Dataset


    class PatchSet(Dataset):
        def __init__(self, root, crop):
            self.root = root
            self.crop = crop

        def __len__(self):
            return 1000

        def __getitem__(self, index):
            image = self.crop(load_image(self.root, index))
            return image, image
"""


def _spawn_on_flag(launch: str) -> dict[str, str]:
    return {"train.py": SPAWN_ON_FLAG.replace("{launch}", launch), "data.py": DATA}


def test_seed_before_a_spawn_that_only_the_distributed_flag_selects_is_clean(tmp_path: Path) -> None:
    # The spawned workers never run the `__main__` block; the other arm is one process.
    assert lines(tmp_path, _spawn_on_flag(SPAWN_ON_FLAG_ELSE), "DDP029") == []


def test_seed_before_a_spawn_under_a_flag_of_another_kind_is_reported(tmp_path: Path) -> None:
    # `if args.profile:` says nothing of how many processes the other arm runs.
    launch = SPAWN_ON_FLAG_ELSE.replace("if args.distributed:", "if args.root:")
    assert lines(tmp_path, _spawn_on_flag(launch), "DDP029") == [("train.py", 44)]


# The script seeds in `main()` and hands over to a project function on either arm: one spawns a
# worker that trains through `train_model`, the other starts processes on `train_model` itself;
# `train_model` seeds again with the rank before it trains.
TRAINER = """\
    import torch


    def train_model(rank, args, model, loader, sampler=None):
        torch.manual_seed({reseed})
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            for data, target in loader:
                optimizer.zero_grad()
                torch.nn.functional.nll_loss(model(data), target).backward()
                optimizer.step()
"""

DISTRIBUTED = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from net import Net
    from trainer import train_model


    def worker(index, args, dataset):
        local_rank = int(os.environ.setdefault("LOCAL_RANK", str(index)))
        dist.init_process_group("gloo", rank=local_rank, world_size=args.world_size)
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(Net())
        sampler = DistributedSampler(dataset, num_replicas=args.world_size, rank=rank)
        loader = DataLoader(dataset, sampler=sampler, batch_size=64, num_workers=2)
        train_model(rank, args, model, loader, sampler=sampler)
        dist.destroy_process_group()


    def train_distributed(args, dataset):
        args.world_size = int(os.environ.get("WORLD_SIZE", args.world_size))
        torch.multiprocessing.spawn(worker, args=(args, dataset), nprocs=1)
"""

LOCAL = """\
    import torch
    from torch.utils.data import DataLoader

    from net import Net
    from trainer import train_model


    def train_local(args, dataset):
        model = Net()
        model.share_memory()
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        processes = []
        for rank in range(args.world_size):
            p = torch.multiprocessing.Process(target=train_model, args=(rank, args, model, loader))
            p.start()
            processes.append(p)
        for p in processes:
            p.join()
"""

NET = """\
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(784, 10)
            self.drop = nn.Dropout(0.25)

        def forward(self, x):
            return self.fc(self.drop(x.flatten(1))).log_softmax(1)
"""

MAIN = """\
    import argparse

    import torch
    import torchvision

    from distributed import train_distributed
    from local import train_local


    def main(args):
        torch.manual_seed(args.seed)
        dataset = torchvision.datasets.MNIST("data", train=True, download=True,
                                             transform=torchvision.transforms.ToTensor())
        if args.multinode:
            train_distributed(args, dataset)
        else:
            train_local(args, dataset)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--multinode", action="store_true")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--world-size", type=int, default=1)
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--lr", type=float, default=0.01)
        main(parser.parse_args())
"""


def _reseeding(reseed: str) -> dict[str, str]:
    return {"main.py": MAIN, "distributed.py": DISTRIBUTED, "local.py": LOCAL, "net.py": NET,
            "trainer.py": TRAINER.replace("{reseed}", reseed)}


def test_seed_replaced_by_a_per_rank_seed_on_both_arms_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _reseeding("args.seed + rank"), "DDP029", target="main.py") == []


def test_seed_followed_by_a_later_seed_without_the_rank_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _reseeding("args.seed"), "DDP029", target="main.py") == [("main.py", 11), ("trainer.py", 5)]


# A project module seeds every generator from its configuration when it is imported; the script
# imports the configuration from it.
SETUP = """\
    import os
    import random
    import sys
    from configparser import ConfigParser

    import numpy as np
    import torch


    class Configuration:
        def __init__(self, *files):
            parser = ConfigParser()
            parser.read(files)
            for section in parser.sections():
                self.__dict__.update({key: eval(value) for key, value in parser.items(section)})


    config = Configuration("setup.ini", os.path.join(sys.argv[1], "setup.ini"))
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed({seed})
"""

IMPORTING = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from setup import config
    from triplets import TripletSet


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        dataset = TripletSet(config.train_path)
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, config.batch_size, sampler=sampler, num_workers=config.num_workers)
        net = DDP(torch.nn.Linear(128, 32).cuda(), device_ids=[rank])
        optimizer = torch.optim.Adam(net.parameters(), lr=config.learning_rate)
        for epoch in range(config.epochs):
            sampler.set_epoch(epoch)
            for anchor, positive, negative in loader:
                loss = torch.nn.functional.triplet_margin_loss(net(anchor.cuda()), net(positive.cuda()),
                                                               net(negative.cuda()))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

TRIPLETS = """\
    import random

    import torch
    from torch.utils.data import Dataset


    class TripletSet(Dataset):
        def __init__(self, path):
            self.items = torch.load(path)

        def __len__(self):
            return len(self.items)

        def __getitem__(self, index):
            negative = random.choice(self.items)
            return self.items[index], self.items[(index + 1) % len(self.items)], negative
"""


def _importing(seed: str, script: str = IMPORTING) -> dict[str, str]:
    return {"train.py": script, "setup.py": SETUP.replace("{seed}", seed), "triplets.py": TRIPLETS}


def test_seed_set_when_a_project_module_is_imported_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _importing("config.seed"), "DDP029") == [("setup.py", 21)]


def test_seed_on_import_with_the_rank_in_it_is_clean(tmp_path: Path) -> None:
    seed = 'config.seed + int(os.environ["RANK"])'
    assert lines(tmp_path, _importing(seed), "DDP029") == []


def test_seed_on_import_replaced_by_a_per_rank_seed_is_clean(tmp_path: Path) -> None:
    script = IMPORTING.replace("    torch.cuda.set_device(rank)\n",
                               "    torch.cuda.set_device(rank)\n    torch.manual_seed(config.seed + rank)\n")
    assert lines(tmp_path, _importing("config.seed", script), "DDP029") == []
