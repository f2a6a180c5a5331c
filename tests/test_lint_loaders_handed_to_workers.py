"""Loaders the starting process builds and hands to the spawned workers (`mp.spawn(train,
args=(world_size, loaders))`, then `for x, y in loaders[rank]:` in the worker's training loop):
each worker reads the whole set unless the loaders shard it (DDP001). The elements of a
replicated list (`[loader] * world_size`) or a list comprehension are that one loader, whatever
the index. Through `ddpcheck lint` on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler


def build_loaders(train_set, world_size):
{build}
    return loaders


def worker(rank, world_size, loaders):
    dist.init_process_group("nccl", init_method="tcp://10.0.0.5:29500", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).to(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = loaders[rank]
    for epoch in range(5):
        for features, target in loader:
            loss = torch.nn.functional.cross_entropy(net(features.to(rank)), target.to(rank))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    train_set = load_train_set()
    mp.spawn(worker, args=(world_size, build_loaders(train_set, world_size)), nprocs=world_size)
"""

REPLICATED = "    loaders = [DataLoader(train_set, batch_size=32, shuffle=True)] * world_size"
COMPREHENSION = "    loaders = [DataLoader(train_set, batch_size=32, shuffle=True) for _ in range(world_size)]"
# A branch that appends per-rank loaders beside the replicated one: that branch is unknown, the
# replicated loader is still read by every worker on the other.
BRANCHES = """\
    if len(train_set) > 10 ** 9:
        loaders = []
        for part in torch.utils.data.random_split(train_set, [len(train_set) // world_size] * world_size):
            loaders.append(DataLoader(part, batch_size=32, shuffle=True))
    else:
        loaders = [DataLoader(train_set, batch_size=32, shuffle=True)] * world_size"""
SHARDED = """\
    loaders = [DataLoader(train_set, batch_size=32,
                          sampler=DistributedSampler(train_set, num_replicas=world_size, rank=r))
               for r in range(world_size)]"""


@pytest.mark.parametrize(("build", "line"), [(REPLICATED, 8), (COMPREHENSION, 8), (BRANCHES, 13)],
                         ids=["replicated", "comprehension", "beside-an-appending-branch"])
def test_a_loader_handed_to_the_workers_without_a_sampler(tmp_path, build, line):
    write_project(tmp_path, {"train.py": SCRIPT.format(build=build)})
    assert finding_set(tmp_path, "train.py", select="DDP001") == {("train.py", line, "DDP001")}


def test_loaders_handed_to_the_workers_with_a_sampler_each_are_clean(tmp_path):
    write_project(tmp_path, {"train.py": SCRIPT.format(build=SHARDED)})
    assert finding_set(tmp_path, "train.py", select="DDP001") == set()


def test_a_loader_the_starting_process_reads_itself_is_clean(tmp_path):
    # Built and read beside `mp.spawn` (statistics of the data before training): not a worker's.
    script = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler


def worker(rank, world_size, train_set):
    dist.init_process_group("nccl", init_method="tcp://10.0.0.5:29500", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).to(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
    for features, target in loader:
        loss = torch.nn.functional.cross_entropy(net(features.to(rank)), target.to(rank))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    train_set = load_train_set()
    mean = 0.0
    for features, _ in DataLoader(train_set, batch_size=1024):
        mean += features.mean().item()
    mp.spawn(worker, args=(2, train_set), nprocs=2)
"""
    write_project(tmp_path, {"train.py": script})
    assert finding_set(tmp_path, "train.py", select="DDP001") == set()
