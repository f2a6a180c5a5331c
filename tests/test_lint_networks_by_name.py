"""Networks looked up by name, `getattr(models, args.arch)()` as `models.__dict__[args.arch]()`:
the names the key may hold decide whether the network has BatchNorm. Through `ddpcheck lint`
(DDP012) on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import argparse
import torch
import torch.distributed as dist
{imports}

parser = argparse.ArgumentParser()
parser.add_argument("--arch", type=str, default={default!r})
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()

dist.init_process_group("nccl")
torch.cuda.set_device(args.local_rank)
model = {lookup}().cuda()
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
"""

PROJECT_NETS = """\
import torch.nn as nn


class TinyResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
"""


@pytest.mark.parametrize(("imports", "default", "lookup", "files", "reported"), [
    ("from torchvision import models", "resnet50", "getattr(models, args.arch)", {}, True),
    ("import torchvision", "resnet18", "getattr(torchvision.models, args.arch)", {}, True),
    ("from torchvision import models", "vit_b_16", "getattr(models, args.arch)", {}, False),
    ("import nets", "TinyResNet", "getattr(nets, args.arch)", {"nets.py": PROJECT_NETS}, True),
    ("import nets", "TinyMLP", "getattr(nets, args.arch)", {"nets.py": PROJECT_NETS}, False),
    ("import nets", "TinyMLP", "nets.__dict__[args.arch]", {"nets.py": PROJECT_NETS}, False),
    ("import nets", "TinyResNet", "nets.__dict__[args.arch]", {"nets.py": PROJECT_NETS}, True),
    # `module.__getattribute__(name)` is the look-up `getattr` makes, called by its own name.
    ("from torchvision import models", "resnet34", "models.__getattribute__(args.arch)", {}, True),
    ("from torchvision import models", "vit_b_16", "models.__getattribute__(args.arch)", {}, False),
    ("import nets", "TinyMLP", "nets.__getattribute__(args.arch)", {"nets.py": PROJECT_NETS}, False),
], ids=["torchvision-resnet", "dotted-owner", "torchvision-vit", "project-batchnorm", "project-no-batchnorm",
        "dict-no-batchnorm", "dict-batchnorm", "getattribute-resnet", "getattribute-vit",
        "getattribute-project-no-batchnorm"])
def test_a_network_chosen_by_getattr_is_read_by_its_possible_names(tmp_path, imports, default, lookup, files,
                                                                    reported):
    write_project(tmp_path, {"train.py": SCRIPT.format(imports=imports, default=default, lookup=lookup), **files})
    found = finding_set(tmp_path, "train.py", select="DDP012")
    assert found == ({("train.py", 14, "DDP012")} if reported else set())


SETTINGS_DICT_SCRIPT = """\
import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torchvision import models


def worker(rank, world_size, settings):
    dist.init_process_group("nccl", init_method="tcp://10.1.1.20:23456", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    net = models.__getattribute__(settings["network"])()
    net = torch.nn.parallel.DistributedDataParallel(net.to(rank), device_ids=[rank])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--network", default={default!r})
    args = parser.parse_args()
    settings = {{"network": args.network, "epochs": 10}}
    mp.spawn(worker, args=(2, settings), nprocs=2)
"""


@pytest.mark.parametrize(("default", "reported"), [("resnet18", True), ("vit_b_16", False)])
def test_a_network_named_in_a_settings_dict_handed_to_the_worker(tmp_path, default, reported):
    # The option's default travels in a dict through mp.spawn's args; the look-up by
    # `__getattribute__` reads the names it may hold there.
    write_project(tmp_path, {"train.py": SETTINGS_DICT_SCRIPT.format(default=default)})
    found = finding_set(tmp_path, "train.py", select="DDP012")
    assert found == ({("train.py", 12, "DDP012")} if reported else set())
