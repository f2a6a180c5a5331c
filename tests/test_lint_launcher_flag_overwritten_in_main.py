"""A `--local_rank` flag parsed by a parser builder (`args = get_args()`) and handed to the
training function, which sets the entry from the process group right after
`init_process_group` and before reading it: under any launcher the flag's value is never used
where there is a process group, so DDP008 stays silent. Through `ddpcheck lint`."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def run(cfg):
    net = torch.nn.Linear(8, 2)
    if cfg.use_gpu:
        dist.init_process_group(backend="nccl", init_method="env://")
        cfg.local_rank = dist.get_rank()
        torch.cuda.set_device(cfg.local_rank)
        net = DDP(net.cuda(), device_ids=[cfg.local_rank])
    if cfg.local_rank == 0:
        print("ready")


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--use_gpu", type=bool, default=True)
    parser.add_argument("--local_rank", type=int, default=0)
    return parser.parse_args()


if __name__ == "__main__":
    cfg = get_args()
    {before}run(cfg)
    if cfg.local_rank == 0:
        print("done")
"""


def _found(tmp_path, text):
    write_project(tmp_path, {"train.py": text})
    return finding_set(tmp_path, "train.py", select="DDP008")


def test_an_entry_set_from_the_process_group_in_the_training_function_is_never_the_source(tmp_path):
    assert _found(tmp_path, SCRIPT.format(before="")) == set()


@pytest.mark.parametrize("variant", [
    # The top level reads the flag before the training function overwrites it.
    SCRIPT.format(before="torch.cuda.set_device(cfg.local_rank)\n    "),
    # The training function reads it before the overwrite.
    SCRIPT.format(before="").replace("    net = torch.nn.Linear(8, 2)\n",
                                     "    net = torch.nn.Linear(8, 2).to(cfg.local_rank)\n"),
    # Not next to the set-up of the process group: another path may keep the flag's value.
    SCRIPT.format(before="").replace(
        "        cfg.local_rank = dist.get_rank()\n", "").replace(
        "    if cfg.local_rank == 0:\n        print(\"ready\")\n",
        "    if cfg.use_gpu > 1:\n        cfg.local_rank = dist.get_rank()\n"),
])
def test_a_flag_read_before_the_overwrite_or_kept_on_some_path_is_reported(tmp_path, variant):
    line = variant.splitlines().index('    parser.add_argument("--local_rank", type=int, default=0)') + 1
    assert _found(tmp_path, variant) == {("train.py", line, "DDP008")}
