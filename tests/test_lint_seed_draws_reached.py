"""DDP029 reads the draws a run can reach: a library loader derived from torch's DataLoader
(PyG's) that shuffles only in the single-process arm draws nothing in the distributed job, and a
project module imported whole under a name (`from tools import splits`) brings in only what the
importer reads on that name. Through `ddpcheck lint --select DDP029`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


GRAPHS = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler
    from torch_geometric.loader import DataLoader


    def worker(gpu, args):
        if args.distributed:
            dist.init_process_group("nccl", init_method="env://", world_size=args.world_size, rank=gpu)
        torch.manual_seed(args.seed)
        molecules = torch.load("molecules.pt")
        if args.distributed:
            loader = DataLoader(molecules, batch_size=32, sampler=DistributedSampler(molecules), num_workers=4)
        else:
            loader = DataLoader(molecules, batch_size=32, shuffle=True, num_workers=4)
        net = torch.nn.Linear(16, 1).cuda(gpu)
        if args.distributed:
            net = DDP(net, device_ids=[gpu])
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        for batch in loader:
            x = batch.x.cuda(gpu){noise}
            loss = net(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--world_size", type=int, default=2)
        args = parser.parse_args()
        if args.distributed:
            mp.spawn(worker, nprocs=args.world_size, args=(args,))
        else:
            worker(0, args)
"""


def test_library_loader_shuffling_only_without_the_group_draws_nothing(tmp_path: Path) -> None:
    # The shuffling PyG loader is built only in the `else` of `if args.distributed:`.
    files = {"train.py": GRAPHS.replace("{noise}", "")}
    assert lines(tmp_path, files, "DDP029") == []


def test_library_loader_run_that_adds_noise_still_draws(tmp_path: Path) -> None:
    files = {"train.py": GRAPHS.replace("{noise}", "\n            x = x + 0.01 * torch.randn_like(x)")}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 14)]


SPLITS = """\
    import numpy as np


    def shuffled_split(n, seed):
        order = np.arange(n)
        np.random.shuffle(order)
        return order[: n // 2], order[n // 2:]


    def fixed_split(n):
        order = np.arange(n)
        return order[: n // 2], order[n // 2:]
"""

SHARDED = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, Subset

    from tools import splits


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.manual_seed(1234)
        data = torch.load("frames.pt")
        {split}
        loader = DataLoader(Subset(data, train_idx), batch_size=64, sampler=DistributedSampler(Subset(data, train_idx)), num_workers=4)
        net = DDP(torch.nn.Linear(8, 1).cuda(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for x, y in loader:
            loss = (net(x.cuda(local_rank)) - y.cuda(local_rank)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _sharded(split: str) -> dict[str, str]:
    return {"train.py": SHARDED.replace("{split}", split), "tools/__init__.py": "", "tools/splits.py": SPLITS}


def test_module_imported_whole_and_never_read_draws_nothing(tmp_path: Path) -> None:
    files = _sharded("train_idx = list(range(len(data)))")
    assert lines(tmp_path, files, "DDP029") == []


def test_module_imported_whole_brings_only_the_functions_read_on_it(tmp_path: Path) -> None:
    files = _sharded("train_idx, _ = splits.fixed_split(len(data))")
    assert lines(tmp_path, files, "DDP029") == []


def test_function_read_on_a_module_imported_whole_draws(tmp_path: Path) -> None:
    files = _sharded("train_idx, _ = splits.shuffled_split(len(data), 0)")
    assert lines(tmp_path, files, "DDP029") == [("train.py", 14)]


def test_module_imported_whole_and_handed_on_counts_whole(tmp_path: Path) -> None:
    # Read bare (passed to a call), the module may be used for anything: all of it counts.
    files = _sharded("train_idx, _ = getattr(splits, 'fixed_split')(len(data))")
    assert lines(tmp_path, files, "DDP029") == [("train.py", 14)]


ONCE = """\
    import argparse
    import random

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def make_points(size):
        left = [(random.uniform(0.0, 0.5), 0) for _ in range(size // 2)]
        right = [(random.uniform(0.5, 1.0), 1) for _ in range(size // 2)]
        return left + right


    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    torch.manual_seed(args.seed)
    points = make_points(10000)
    loader = DataLoader(points, batch_size=64, sampler=DistributedSampler(points), num_workers=2)
    net = DDP(torch.nn.Linear(1, 2).cuda(), device_ids=[args.local_rank])
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(10):
        {per_epoch}
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x.float().unsqueeze(1).cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_data_set_drawn_once_by_a_function_of_the_file_draws_nothing_while_training(tmp_path: Path) -> None:
    files = {"train.py": ONCE.replace("{per_epoch}", "pass")}
    assert lines(tmp_path, files, "DDP029") == []


def test_data_set_drawn_again_in_the_epoch_loop_draws(tmp_path: Path) -> None:
    # Drawn again at every epoch: with the same seed every rank redraws the same points.
    files = {"train.py": ONCE.replace("{per_epoch}", "extra = make_points(100)\n        loader2 = DataLoader(extra)")}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 21)]
