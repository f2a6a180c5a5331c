"""A finding about one line of a long string (a usage docstring) points at that line, through
`ddpcheck lint`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_findings

LAUNCHER = '''\
import argparse
import torch
import torch.distributed as dist

"""Launcher for the x-vector recipe.

How to run it:
    1. On one GPU:
        python3 launcher.py
    2. With DDP, one process per GPU in --gpu-id:
        python3 -m torch.distributed.launch --nproc_per_node=2 launcher.py --gpu-id=0,1
"""

parser = argparse.ArgumentParser()
parser.add_argument("--gpu-id", default="0")
args = parser.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(0)
dist.destroy_process_group()
'''


def _lines(path: Path) -> list[tuple[str, int, int]]:
    return [(f["code"], f["location"]["line"], f["location"]["column"])
            for f in lint_findings(path.parent, path.name, select="DDP008")]


def test_a_launch_command_in_a_docstring_is_reported_on_its_own_line(tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    assert _lines(script) == [("DDP008", 11, 9)]

