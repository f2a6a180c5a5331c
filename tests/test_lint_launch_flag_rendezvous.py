"""A script that takes torch.distributed.launch's `--local_rank` flag and meets through `env://`
reads the launcher's MASTER_ADDR/MASTER_PORT; writing literals over them is reported, through
`ddpcheck lint`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

RUN = """\
import argparse
import os

import torch

from engine.trainer import Trainer


def main(args):
    model = torch.nn.Linear(80, 4000).cuda()
    trainer = Trainer(model, local_rank=args.local_rank, ngpu=args.ngpu)
    trainer.train()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--ngpu", type=int, default=1)
    parser.add_argument("-p", "--parallel_mode", type=str, default="dp")
    {flag}
    args = parser.parse_args()
    if args.parallel_mode == "ddp":
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        torch.cuda.set_device(args.local_rank)
    main(args)
"""

TRAINER = """\
import torch
import torch.distributed as dist


class Trainer:
    def __init__(self, model, local_rank=0, ngpu=1):
        self.model = model
        if ngpu > 1:
            dist.init_process_group(backend="nccl", init_method={method},
                                    rank=local_rank, world_size=ngpu)
            self.model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])

    def train(self):
        pass
"""

FLAG = 'parser.add_argument("-r", "--local_rank", type=int, default=0)'


def _lint(tmp_path: Path, flag: str, method: str = "'env://'") -> list[tuple[str, int]]:
    files = {"engine/__init__.py": "", "engine/trainer.py": TRAINER.format(method=method),
             "run.py": RUN.format(flag=flag)}
    return [(f["code"], f["location"]["line"]) for f in lint_project(tmp_path, files, "run.py", select="DDP015")]


def test_literal_rendezvous_over_the_launchers_is_reported(tmp_path):
    assert _lint(tmp_path, FLAG) == [("DDP015", 22)]


def test_the_default_env_rendezvous_is_the_launchers_too(tmp_path):
    assert _lint(tmp_path, FLAG, "None") == [("DDP015", 22)]


def test_without_the_launch_flag_stays_clean(tmp_path):
    # Nothing says an outside launcher starts it: the script may be run by hand with these.
    assert _lint(tmp_path, 'parser.add_argument("--local_rank_hint", type=int, default=0)') == []


def test_a_tcp_rendezvous_of_its_own_stays_clean(tmp_path):
    # The process group meets at the URL it is given; the environment is not read.
    assert _lint(tmp_path, FLAG, "'tcp://' + 'localhost:23456'") == []


def test_a_script_srun_starts_stays_clean(tmp_path):
    # It reads SLURM's variables: srun exports no rendezvous, so the script must write one.
    flag = FLAG + '\n    nodes = os.environ["SLURM_JOB_NODELIST"]'
    assert _lint(tmp_path, flag) == []
