"""Code that a distributed job never runs, through `ddpcheck lint`:

- a training function of the script that only the single-process arm of the launch test calls
  (`if args.distributed: train_ddp(cfg)` / `else: train(cfg)`): its loader reads the whole set
  in a run of one process, as it should (DDP001 stays silent); called on the distributed path
  too, it is reported;
- a loader of the starting process of a script that sets the process group up only in the
  workers it spawns (`elif args.mode == "inspect": inspect_batch(args)` beside a `train(args)`
  that calls `mp.spawn`): that process has no process group; a worker calling the same
  function makes it reported;
- a top-level function of the script that nothing calls or names (an older version of the
  training loop left beside the one the run uses): its progress bar never runs (DDP020 stays
  silent); once something calls it, it is reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

LAUNCH = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", action="store_true")


    def train_ddp(cfg):
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        dataset = ImageFolder(cfg["root"])
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=cfg["bs"], sampler=sampler)
        model = DDP(Net().cuda(), device_ids=[rank])
        run_epochs(model, loader, sampler)


    def train(cfg):
        dataset = ImageFolder(cfg["root"])
        loader = DataLoader(dataset, batch_size=cfg["bs"], shuffle=True)
        run_epochs(Net().cuda(), loader, None)


    def main():
        args = parser.parse_args()
        cfg = load_config()
        {launch}


    if __name__ == "__main__":
        main()
"""


def test_a_loader_built_only_for_the_single_process_arm_is_not_reported(tmp_path) -> None:
    launch = "if args.distributed:\n            train_ddp(cfg)\n        else:\n            train(cfg)"
    write_project(tmp_path, {"train.py": LAUNCH.format(launch=launch)})
    assert finding_set(tmp_path, "train.py", select="DDP001") == set()


def test_the_same_loader_is_reported_when_the_distributed_arm_calls_it_too(tmp_path) -> None:
    launch = "if args.distributed:\n            train_ddp(cfg)\n            train(cfg)\n        else:\n            train(cfg)"
    write_project(tmp_path, {"train.py": LAUNCH.format(launch=launch)})
    assert finding_set(tmp_path, "train.py", select="DDP001") == {("train.py", 25, "DDP001")}


LEFTOVER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    def fit_sharded_v1():
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in tqdm(loader):
            loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in tqdm(loader, disable=local_rank != 0):
            loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        {call}()
"""


def test_a_progress_bar_in_a_function_nothing_calls_is_not_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": LEFTOVER.format(call="main")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_the_progress_bar_is_reported_once_the_function_is_called(tmp_path) -> None:
    write_project(tmp_path, {"train.py": LEFTOVER.format(call="fit_sharded_v1")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 15, "DDP020")}


SPAWNED = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def worker(rank, world_size, args):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        dataset = GraphDataset(args.train_file)
        loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        model = DDP(Net().cuda(), device_ids=[rank])
        fit(model, loader)
        {worker_extra}


    def inspect_batch(args):
        dataset = GraphDataset(args.train_file)
        loader = DataLoader(dataset, batch_size=2, shuffle=False)
        print(next(iter(loader)))


    def train(args):
        mp.spawn(worker, args=(args.ngpus, args), nprocs=args.ngpus)


    if __name__ == "__main__":
        args = argparse.ArgumentParser().parse_args()
        if args.mode == "train":
            train(args)
        elif args.mode == "inspect":
            inspect_batch(args)
"""


def test_a_loader_of_the_starting_process_of_a_spawning_script_is_not_reported(tmp_path) -> None:
    # The process group exists only in the spawned workers: `inspect_batch` runs without one.
    write_project(tmp_path, {"train.py": SPAWNED.format(worker_extra="")})
    assert finding_set(tmp_path, "train.py", select="DDP001") == set()


def test_the_same_loader_is_reported_when_a_worker_calls_it(tmp_path) -> None:
    write_project(tmp_path, {"train.py": SPAWNED.format(worker_extra="inspect_batch(args)")})
    assert finding_set(tmp_path, "train.py", select="DDP001") == {("train.py", 22, "DDP001")}
