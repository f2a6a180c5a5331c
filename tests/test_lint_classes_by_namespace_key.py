"""A class picked from a project package by a run-time key, `tasks.__dict__[cfg.task]()` or
`getattr(tasks, name)()`: the instance is one of the classes that package's top level holds, so
its methods (`task.build_model()`, `task.build_loss()`) are each of theirs. A package that also
holds a function or a value leaves the choice unknown. Through `ddpcheck lint` on small projects
in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist
import jobs
from settings import load_settings

settings = load_settings("run.yaml")
job = {pick}()


def run(local_rank):
    dist.init_process_group("nccl", init_method="env://")
    net = job.build_model()
    loss_fn = job.build_loss().cuda(local_rank)
    torch.cuda.set_device(local_rank)
    net.cuda(local_rank)
    net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local_rank])
    return net, loss_fn


if __name__ == "__main__":
    run(int(os.environ["LOCAL_RANK"]))
"""

SETTINGS = """\
import yaml


def load_settings(path):
    with open(path) as handle:
        return yaml.safe_load(handle)
"""

BASE = """\
class Job:
    def build_model(self):
        raise NotImplementedError

    def build_loss(self):
        raise NotImplementedError
"""

CONV_JOB = """\
import torch.nn as nn
import torchvision
from .base import Job


class ImageJob(Job):
    def build_model(self):
        return torchvision.models.resnet34()

    def build_loss(self):
        return nn.CrossEntropyLoss()
"""

MLP_JOB = """\
import torch.nn as nn
from .base import Job


class TabularJob(Job):
    def build_model(self):
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def build_loss(self):
        return nn.CrossEntropyLoss()
"""

PACKAGE = """\
from .image_job import ImageJob
from .tabular_job import TabularJob
"""

MLP_ONLY_PACKAGE = """\
from .tabular_job import TabularJob
"""

# A builder function beside the classes: the key may name it too, and what it returns is not read.
PACKAGE_WITH_FUNCTION = """\
from .tabular_job import TabularJob


def make_job(name):
    return TabularJob()
"""


def _project(package: str, pick: str) -> dict[str, str]:
    return {
        "train.py": SCRIPT.format(pick=pick),
        "settings.py": SETTINGS,
        "jobs/__init__.py": package,
        "jobs/base.py": BASE,
        "jobs/image_job.py": CONV_JOB,
        "jobs/tabular_job.py": MLP_JOB,
    }


@pytest.mark.parametrize("pick", ['jobs.__dict__[settings["job"]]', 'getattr(jobs, settings["job"])'])
def test_a_network_built_by_a_class_picked_from_a_package_by_key(tmp_path, pick):
    # One of the classes the key may name builds a torchvision ResNet (BatchNorm).
    write_project(tmp_path, _project(PACKAGE, pick))
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 17, "DDP012")}


@pytest.mark.parametrize("package", [MLP_ONLY_PACKAGE, PACKAGE_WITH_FUNCTION], ids=["no-batchnorm", "with-function"])
def test_a_package_whose_classes_build_no_batchnorm_or_that_holds_a_function_is_clean(tmp_path, package):
    write_project(tmp_path, _project(package, 'jobs.__dict__[settings["job"]]'))
    assert finding_set(tmp_path, "train.py", select="DDP012") == set()


def test_a_loss_module_of_a_class_picked_by_key_holds_no_tensors_to_move(tmp_path):
    # `job.build_loss().cuda(local_rank)` before set_device moves a CrossEntropyLoss: no
    # parameters or buffers, so no CUDA work lands on GPU 0 (DDP003 stays silent).
    write_project(tmp_path, _project(PACKAGE, 'jobs.__dict__[settings["job"]]'))
    assert finding_set(tmp_path, "train.py", select="DDP003") == set()
