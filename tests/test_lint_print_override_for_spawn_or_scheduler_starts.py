"""A `builtins.print` override (DDP020), through `ddpcheck lint`, made only for the starts a
script makes itself or a job scheduler makes: `if args.multiprocessing_distributed and args.gpu
!= 0 or (args.is_slurm_job and args.rank != 0):`. A torchrun start (the script reads RANK from
the environment) sets neither flag, so every rank prints in the loop and it is reported; an
override under a plain rank test silences the loop on every start."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import argparse
    import builtins
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--multiprocessing-distributed", action="store_true")
    parser.add_argument("--dist-url", default="env://")
    parser.add_argument("--rank", default=-1, type=int)
    parser.add_argument("--world-size", default=-1, type=int)


    def main_worker(gpu, ngpus_per_node, args):
        args.gpu = gpu
        if {silenced}:
            def print_pass(*args):
                pass
            builtins.print = print_pass
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
        if args.multiprocessing_distributed:
            args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group("nccl", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
        torch.cuda.set_device(args.gpu)
        model = DDP(Encoder().cuda(), device_ids=[args.gpu])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
        for epoch in range(100):
            for i, (x, y) in enumerate(loader):
                loss = model(x.cuda(), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if i % 10 == 0:
                    print(epoch, i, loss.item())


    def main():
        args = parser.parse_args()
        args.is_slurm_job = "SLURM_JOB_ID" in os.environ
        if args.is_slurm_job:
            args.rank = int(os.environ["SLURM_PROCID"])
        ngpus_per_node = torch.cuda.device_count()
        if args.multiprocessing_distributed:
            args.world_size = ngpus_per_node * args.world_size
            mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
        else:
            main_worker(int(os.environ.get("LOCAL_RANK", 0)), ngpus_per_node, args)


    if __name__ == "__main__":
        main()
"""


def test_an_override_for_spawned_or_scheduled_starts_leaves_a_torchrun_start_printing(tmp_path) -> None:
    silenced = "args.multiprocessing_distributed and args.gpu != 0 or (args.is_slurm_job and args.rank != 0)"
    write_project(tmp_path, {"train.py": SCRIPT.format(silenced=silenced)})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 38, "DDP020")}


def test_an_override_under_a_plain_rank_test_silences_the_loop(tmp_path) -> None:
    write_project(tmp_path, {"train.py": SCRIPT.format(silenced="args.rank != 0")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()
