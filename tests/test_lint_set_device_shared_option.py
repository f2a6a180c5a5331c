"""`CUDA_VISIBLE_DEVICES` set at import from a command-line option (`--cuda 0,1,2,3`) in an
mp.spawn script that numbers its GPUs by rank: every spawned process parses the same command
line, so the setting is shared and pins none of them (DDP003). Through `ddpcheck lint`, with the
variants that still pin a process or that the lint cannot read."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

SPAWNED = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", type=str, default="")
    parser.add_argument("--local_rank", type=str, default="0")
    args = parser.parse_args()
    os.environ["CUDA_VISIBLE_DEVICES"] = {visible}


    def train(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        agent = DDP(torch.nn.Linear(8, 2).to(f"cuda:{{rank}}"))
        for step in range(100):
            agent(torch.randn(4, 8).to(rank)).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
"""


def test_an_option_shared_by_every_spawned_process_pins_none(tmp_path: Path) -> None:
    files = {"train.py": SPAWNED.format(visible="args.cuda")}
    assert lines(tmp_path, files, "DDP003") == [("train.py", 17)]


def test_an_option_named_for_the_process_may_pin_it(tmp_path: Path) -> None:
    # `--local_rank` is the process's own: a launcher may start each with its own value.
    files = {"train.py": SPAWNED.format(visible="args.local_rank")}
    assert lines(tmp_path, files, "DDP003") == []


def test_a_value_from_the_environment_may_pin_the_process(tmp_path: Path) -> None:
    files = {"train.py": SPAWNED.format(visible='os.environ.get("GPU_LIST", "0")')}
    assert lines(tmp_path, files, "DDP003") == []
