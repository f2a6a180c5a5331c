"""The global rank read through a helper that takes the variable's name, and kept in a
dataclass, through `ddpcheck lint`: used as the GPU index it is still the global rank."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

SETUP = """\
import os
from dataclasses import dataclass


def read_environment(variable):
    return int(os.environ.get(variable))


@dataclass
class JobInfo:
    rank: int
    local_rank: int
    world_size: int


class SlurmJob(JobInfo):
    def __init__(self):
        super().__init__(
            rank=read_environment("SLURM_PROCID"),
            local_rank=read_environment("SLURM_LOCALID"),
            world_size=read_environment("SLURM_NTASKS"),
        )
"""

TRAIN = """\
import torch
import torch.distributed as dist

from cluster import JobInfo, SlurmJob, read_environment


def main():
    {job}
    device = torch.device("cuda", {index})
    dist.init_process_group("nccl", init_method="env://")
    model = torch.nn.Linear(16, 2).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model)
    return model


if __name__ == "__main__":
    main()
"""


def _lint(tmp_path: Path, job: str, index: str) -> list[tuple[str, int]]:
    files = {"cluster.py": SETUP, "train.py": TRAIN.format(job=job, index=index)}
    return [(f["code"], f["location"]["line"]) for f in lint_project(tmp_path, files, "train.py", select="DDP007")]


def test_a_helper_given_the_global_rank_variable_is_reported(tmp_path):
    assert _lint(tmp_path, 'rank = read_environment("SLURM_PROCID")', "rank") == [("DDP007", 9)]


def test_a_helper_given_the_local_rank_variable_stays_clean(tmp_path):
    assert _lint(tmp_path, 'gpu = read_environment("SLURM_LOCALID")', "gpu") == []


def test_a_dataclass_field_made_from_the_global_rank_is_reported(tmp_path):
    job = 'job = JobInfo(rank=read_environment("SLURM_PROCID"), local_rank=0, world_size=1)'
    assert _lint(tmp_path, job, "job.rank") == [("DDP007", 9)]


def test_a_dataclass_field_given_by_position_is_reported(tmp_path):
    job = 'job = JobInfo(read_environment("SLURM_PROCID"), 0, 1)'
    assert _lint(tmp_path, job, "job.rank") == [("DDP007", 9)]


def test_a_dataclass_subclass_filling_its_fields_in_its_constructor_is_reported(tmp_path):
    assert _lint(tmp_path, "job = SlurmJob()", "job.rank") == [("DDP007", 9)]


def test_the_local_rank_field_stays_clean(tmp_path):
    assert _lint(tmp_path, "job = SlurmJob()", "job.local_rank") == []
