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
