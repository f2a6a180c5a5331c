"""DDP012: an import statement is no conversion to SyncBatchNorm. A network module that
imports a vendored synchronised layer by its module path (`from nets.sync_batchnorm.layers
import SyncedBN2d`) but builds `nn.BatchNorm2d` is still a network of unsynchronised BatchNorm;
only code that converts (or builds `nn.SyncBatchNorm`) counts. Through `ddpcheck lint`."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

NET = """\
import torch.nn as nn
from nets.sync_batchnorm.layers import SyncedBN2d


class SegHead(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3)
        self.norm = nn.BatchNorm2d(32)
        self.out = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        return self.out(self.norm(self.conv(x)))
"""

LAYERS = """\
import torch.nn as nn


class SyncedBN2d(nn.BatchNorm2d):
    pass
"""

WRAPPER = """\
import torch


def distribute(model, device, local_rank):
    {convert}model.to(device)
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
"""

TRAIN = """\
import os

import torch
import torch.distributed as dist

from nets.head import SegHead
from tools.wrapping import distribute


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = SegHead(19)
    model = distribute(model, torch.device("cuda", local_rank), local_rank)


if __name__ == "__main__":
    main()
"""


def _found(tmp_path, convert):
    write_project(tmp_path, {
        "train.py": TRAIN,
        "nets/__init__.py": "",
        "nets/head.py": NET,
        "nets/sync_batchnorm/__init__.py": "",
        "nets/sync_batchnorm/layers.py": LAYERS,
        "tools/__init__.py": "",
        "tools/wrapping.py": WRAPPER.format(convert=convert),
    })
    return finding_set(tmp_path, "train.py", select="DDP012")


def test_a_network_that_only_imports_a_synchronised_layer_is_reported(tmp_path):
    assert _found(tmp_path, "") == {("wrapping.py", 6, "DDP012")}


@pytest.mark.parametrize("convert", [
    "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n    ",
    # Imported by name, then used: the use converts.
    "from torch.nn import SyncBatchNorm\n    model = SyncBatchNorm.convert_sync_batchnorm(model)\n    ",
])
def test_a_network_converted_before_the_wrap_stays_clean(tmp_path, convert):
    assert _found(tmp_path, convert) == set()
