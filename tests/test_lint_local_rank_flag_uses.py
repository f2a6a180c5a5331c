"""The `--local_rank` flag as scripts keep it, through `ddpcheck lint` (DDP008): a flag whose
entry is set from the process group right after the parse is never the source, and the two
spellings torch.distributed.launch has passed (`--local-rank` beside `--local_rank`) are one
reliance on it, reported once."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

SCRIPT = """\
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--local_rank", type=int, default=-1)
    opt = parser.parse_args()

    dist.init_process_group(backend="nccl")
    opt.local_rank = dist.get_rank() % torch.cuda.device_count()
    torch.cuda.set_device(opt.local_rank)
    model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[opt.local_rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr * dist.get_world_size())
    dist.destroy_process_group()
"""


def _found(tmp_path, text):
    write_project(tmp_path, {"train.py": text})
    return finding_set(tmp_path, "train.py", select="DDP008")


def test_a_flag_overwritten_from_the_process_group_is_never_read(tmp_path):
    assert _found(tmp_path, SCRIPT) == set()


def test_a_flag_read_before_it_is_overwritten_is_reported(tmp_path):
    early = SCRIPT.replace('    dist.init_process_group(backend="nccl")\n',
                           '    torch.cuda.set_device(opt.local_rank)\n    dist.init_process_group(backend="nccl")\n')
    assert early != SCRIPT
    assert _found(tmp_path, early) == {("train.py", 10, "DDP008")}


def test_a_flag_kept_as_the_source_is_reported(tmp_path):
    kept = SCRIPT.replace("    opt.local_rank = dist.get_rank() % torch.cuda.device_count()\n", "")
    assert kept != SCRIPT
    assert _found(tmp_path, kept) == {("train.py", 10, "DDP008")}


def test_both_spellings_of_the_flag_are_one_finding(tmp_path):
    both = SCRIPT.replace('    parser.add_argument("--local_rank", type=int, default=-1)\n',
                          '    parser.add_argument("--local-rank", type=int, default=-1)\n'
                          '    parser.add_argument("--local_rank", type=int, default=-1)\n'
                          ).replace("    opt.local_rank = dist.get_rank() % torch.cuda.device_count()\n", "")
    assert both.count("add_argument") == 3
    assert _found(tmp_path, both) == {("train.py", 10, "DDP008")}
