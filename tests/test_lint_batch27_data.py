"""Rendezvous, seeds, samplers and loads (DDP011, DDP015, ...) on mechanisms seen on public
scripts of batch 27: each through `ddpcheck lint` on a small project written in the style of
the scripts, with a variant that must stay as it was."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A script started by hand on each machine, its rank and local rank given as positional words
# of the command line, meeting at the first machine's address.
HAND_STARTED = """\
    import sys
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    world_size = 2
    master = "tcp://172.31.40.12:23456"
    {rank_line}
    dist.init_process_group(backend="nccl", init_method=master, rank={rank}, world_size=world_size)
    local_rank = int(sys.argv[2])
    torch.cuda.set_device(local_rank)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).cuda(), device_ids=[local_rank])
"""


def test_rank_from_a_positional_word_of_the_command_line_is_a_hand_started_job(tmp_path: Path) -> None:
    files = {"train.py": HAND_STARTED.format(rank_line="", rank="int(sys.argv[1])")}
    assert lines(tmp_path, files, "DDP015") == []


def test_rank_name_bound_from_argv_is_a_hand_started_job(tmp_path: Path) -> None:
    files = {"train.py": HAND_STARTED.format(rank_line="rank = int(sys.argv[1])", rank="rank")}
    assert lines(tmp_path, files, "DDP015") == []


def test_rank_from_a_flag_with_a_hard_coded_url_is_still_reported(tmp_path: Path) -> None:
    files = {"train.py": HAND_STARTED.format(rank_line="import argparse\n    args = argparse.ArgumentParser().parse_args()",
                                             rank="args.rank")}
    assert lines(tmp_path, files, "DDP015") == [("train.py", 10)]


# A project copy of torch's DistributedSampler handed to the loader through a batch sampler by a
# data-loading package; the script seeds torch with a literal when its configuration asks.
SAMPLERS = """\
    import math
    import torch
    import torch.distributed as dist
    from torch.utils.data.sampler import Sampler


    class {name}(Sampler):
        def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True):
            if num_replicas is None:
                num_replicas = dist.get_world_size()
            if rank is None:
                rank = dist.get_rank()
            self.dataset = dataset
            self.num_replicas = num_replicas
            self.rank = rank
            self.epoch = 0
            self.num_samples = int(math.ceil(len(self.dataset) * 1.0 / self.num_replicas))
            self.total_size = self.num_samples * self.num_replicas
            self.shuffle = shuffle

        def __iter__(self):
            g = torch.Generator()
            g.manual_seed(self.epoch)
            indices = torch.randperm(len(self.dataset), generator=g).tolist()
            indices += indices[: (self.total_size - len(indices))]
            offset = self.num_samples * self.rank
            return iter(indices[offset:offset + self.num_samples])

        def __len__(self):
            return self.num_samples
"""

LOADERS = """\
    import torch
    from data import samplers
    from data.sets import RaySet


    def make_sampler(dataset, shuffle, is_distributed):
        if is_distributed:
            return samplers.{name}(dataset, shuffle=shuffle)
        return torch.utils.data.sampler.RandomSampler(dataset)


    def make_data_loader(cfg, is_train=True, is_distributed=False):
        dataset = RaySet(cfg.data_root, is_train)
        sampler = make_sampler(dataset, True, is_distributed)
        batch_sampler = torch.utils.data.sampler.BatchSampler(sampler, cfg.batch_size, False)
        return torch.utils.data.DataLoader(dataset, batch_sampler=batch_sampler, num_workers=4)
"""

SETS = """\
    import torch
    from torch.utils.data import Dataset


    class RaySet(Dataset):
        def __init__(self, root, is_train):
            self.rays = torch.load(root, map_location="cpu")

        def __len__(self):
            return len(self.rays)

        def __getitem__(self, i):
            ray = self.rays[i]
            return ray + 0.01 * torch.rand_like(ray)
"""

SEEDED_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from data import make_data_loader

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--fix_random", action="store_true")
    parser.add_argument("--data_root", default="rays.pt")
    parser.add_argument("--batch_size", type=int, default=4)
    cfg = parser.parse_args()

    if cfg.fix_random:
        torch.manual_seed(0)


    def main():
        torch.cuda.set_device(cfg.local_rank)
        dist.init_process_group("nccl")
        net = nn.parallel.DistributedDataParallel(nn.Linear(3, 3).cuda(), device_ids=[cfg.local_rank])
        optimizer = torch.optim.Adam(net.parameters())
        loader = make_data_loader(cfg, is_train=True, is_distributed=True)
        for rays in loader:
            loss = net(rays.cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _seeded_project(name: str) -> dict[str, str]:
    return {"data/__init__.py": "from .loaders import make_data_loader\n",
            "data/samplers.py": SAMPLERS.format(name=name),
            "data/loaders.py": LOADERS.format(name=name),
            "data/sets.py": SETS,
            "train.py": SEEDED_SCRIPT}


def test_same_seed_beside_a_project_copy_of_distributed_sampler(tmp_path: Path) -> None:
    assert lines(tmp_path, _seeded_project("DistributedSampler"), "DDP029") == [("train.py", 15)]


def test_same_seed_beside_a_renamed_project_copy_of_distributed_sampler(tmp_path: Path) -> None:
    assert lines(tmp_path, _seeded_project("ShardSampler"), "DDP029") == [("train.py", 15)]


def test_project_sampler_that_does_not_shard_leaves_the_seed_alone(tmp_path: Path) -> None:
    files = _seeded_project("ShardSampler")
    files["data/samplers.py"] = files["data/samplers.py"].replace("num_replicas", "copies").replace(
        "total_size", "size")
    assert lines(tmp_path, files, "DDP029") == []


# A spawn script whose device helper sets the device while it lists the GPUs, on rank 0 only.
DEVICE_HELPER = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def show_devices(rank, world_size):
        {guard}
            for i in range(torch.cuda.device_count()):
                torch.cuda.set_device(torch.device(f"cuda:{{rank}}"))
                print(f"cuda:{{i}}: {{torch.cuda.get_device_name(i)}} [rank={{rank}}/{{world_size}}]")


    def setup(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)


    def train(rank, world_size):
        show_devices(rank, world_size)
        setup(rank, world_size)
        device = torch.device(f"cuda:{{rank}}")
        model = DDP(nn.Linear(10, 2).to(device), device_ids=[rank])
        dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
"""


def test_device_set_on_rank_zero_only_leaves_the_others_on_gpu_zero(tmp_path: Path) -> None:
    files = {"train.py": DEVICE_HELPER.format(guard="if rank == 0:")}
    assert lines(tmp_path, files, "DDP003") == [("train.py", 19)]


def test_device_set_on_every_rank_is_clean(tmp_path: Path) -> None:
    files = {"train.py": DEVICE_HELPER.format(guard="if torch.cuda.is_available():")}
    assert lines(tmp_path, files, "DDP003") == []


def test_device_set_on_every_rank_but_zero_is_left_alone(tmp_path: Path) -> None:
    files = {"train.py": DEVICE_HELPER.format(guard="if rank != 0:")}
    assert lines(tmp_path, files, "DDP003") == []


# A script with two modes, each its own function that makes the process group and trains.
TWO_MODES = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--mode", default="train")
    args = parser.parse_args()


    def train_model(model, loader):
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl")
        model = nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[args.local_rank])
        for x in loader:
            model(x.cuda()).sum().backward()


    def train_with_penalty(model, loader):
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl")
        model = nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[args.local_rank])
        for x in loader:
            (model(x.cuda()).sum() + 1e-4 * sum(p.abs().sum() for p in model.parameters())).backward()
        {teardown}


    def main():
        model, loader = nn.Linear(4, 2), [torch.randn(8, 4)]
        if args.mode == "train":
            train_model(model, loader)
        elif args.mode == "penalty":
            train_with_penalty(model, loader)


    if __name__ == "__main__":
        main()
"""


def test_each_mode_that_makes_a_group_and_leaves_it_is_reported(tmp_path: Path) -> None:
    files = {"train.py": TWO_MODES.format(teardown="")}
    assert lines(tmp_path, files, "DDP005") == [("train.py", 14), ("train.py", 22)]


def test_a_teardown_in_one_mode_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    files = {"train.py": TWO_MODES.format(teardown="dist.destroy_process_group()")}
    assert lines(tmp_path, files, "DDP005") == []
