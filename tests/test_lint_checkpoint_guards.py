"""Checkpoint saves under rank tests written as project helpers, and under an on/off distributed
switch, through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

DIST_UTILS = """\
    import torch.distributed as dist


    def rank():
        if not dist.is_available():
            return 0
        if not dist.is_initialized():
            return 0
        return dist.get_rank()


    def primary():
        if not dist.is_available():
            return True
        if not dist.is_initialized():
            return True
        return rank() == 0


    def verbose():
        return True
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils.dist import primary, verbose


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        for step in range(100):
            model(torch.randn(4, 8).cuda()).sum().backward()
            if {test}:
                torch.save(model.module.state_dict(), "ckpt.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _saves(tmp_path, test: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, {"utils/__init__.py": "", "utils/dist.py": DIST_UTILS, "train.py": TRAIN.format(test=test)})
    return _findings(tmp_path, "train.py", select="DDP010")


def test_a_project_helper_returning_a_rank_zero_test_guards_the_save(tmp_path):
    # primary() is True on a single process and `rank() == 0` once distributed: rank 0 only.
    assert _saves(tmp_path, "primary()") == set()


def test_a_project_helper_that_returns_true_everywhere_is_no_guard(tmp_path):
    assert _saves(tmp_path, "verbose()") == {("train.py", 18, "DDP010")}


SWITCH = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main(args):
        model = torch.nn.Linear(8, 8)
        if args.dist == "OFF":
            model = model.cuda()
            model.load_state_dict(torch.load("resume.pth"))
            for epoch in range(10):
                torch.save(model.state_dict(), "single.pth")
        if args.dist == "ON":
            dist.init_process_group("nccl")
            gpu_id = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(gpu_id)
            model = DDP(model.cuda(), device_ids=[gpu_id])
            for epoch in range(10):
                torch.save(model.module.state_dict(), "every.pth")
                if gpu_id == 0:
                    torch.save(model.module.state_dict(), "main.pth")
            dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--dist", default="ON", choices=["ON", "OFF"])
        main(parser.parse_args())
    """


def test_an_on_off_distributed_switch_keeps_its_off_branch_to_one_process(tmp_path):
    _write(tmp_path, {"main.py": SWITCH})
    # The "OFF" branch is a single process: its load and save are not per-rank; the "ON"
    # branch's unguarded save is.
    assert _findings(tmp_path, "main.py", select="DDP010,DDP011") == {("main.py", 22, "DDP010")}


SETUP_LAUNCH = """\
    import torch
    import torch.distributed as dist


    def setup_ddp(rank, world_size):
        dist.init_process_group(
            backend="nccl",
            rank=rank,
            world_size=world_size,
            init_method="tcp://localhost:29500",
        )
        torch.cuda.set_device(rank)

    # Launch with: torch.distributed.launch --nproc_per_node=2 ddp_setup.py
    """


def test_a_setup_file_launched_by_the_old_launcher_in_its_usage_text_gets_the_rendezvous_finding(tmp_path):
    _write(tmp_path, {"ddp_setup.py": SETUP_LAUNCH})
    assert ("ddp_setup.py", 6, "DDP015") in _findings(tmp_path, "ddp_setup.py", select="DDP015")


# A spawned worker keeps its index under another name before it rebinds `rank` to a GPU id.
POOLED = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def demo_checkpoint(rank, world_size, pool):
        process_id = rank
        rank = pool[rank]
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:12355", rank=process_id, world_size=world_size)
        ddp_model = DDP(torch.nn.Linear(4, 4).to(rank), device_ids=[rank])
        if GUARD:
            torch.save(ddp_model.module.state_dict(), "model.checkpoint")
        dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        pool = [0, 1]
        mp.spawn(demo_checkpoint, args=(len(pool), pool), nprocs=len(pool))
    """


def test_a_save_guarded_by_a_copy_of_the_workers_rank_is_clean(tmp_path):
    _write(tmp_path, {"demo.py": POOLED.replace("GUARD", "process_id == 0")})
    assert _findings(tmp_path, "demo.py", select="DDP010") == set()


def test_a_save_guarded_by_something_else_is_still_reported(tmp_path):
    _write(tmp_path, {"demo.py": POOLED.replace("GUARD", "world_size > 1")})
    assert _findings(tmp_path, "demo.py", select="DDP010") == {("demo.py", 13, "DDP010")}
