"""Rendezvous, devices and teardown (DDP003, DDP005, DDP015) on mechanisms seen on public
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


def test_rank_from_argv_in_a_file_its_usage_text_launches_is_still_reported(tmp_path: Path) -> None:
    # The DDP tutorial's form: the usage comment starts the file with a launcher, which sets the
    # rendezvous itself (and whose first word would not even be the rank).
    script = "    # Launch with: torchrun --nproc_per_node=2 train.py\n" + HAND_STARTED.format(
        rank_line="", rank="int(sys.argv[1])")
    assert lines(tmp_path, {"train.py": script}, "DDP015") == [("train.py", 10)]


def test_rank_from_a_flag_with_a_hard_coded_url_is_still_reported(tmp_path: Path) -> None:
    files = {"train.py": HAND_STARTED.format(rank_line="import argparse\n    args = argparse.ArgumentParser().parse_args()",
                                             rank="args.rank")}
    assert lines(tmp_path, files, "DDP015") == [("train.py", 10)]


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
