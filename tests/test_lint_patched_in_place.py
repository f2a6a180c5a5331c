"""Outside calls that hand back the model they are given (apex's `amp.initialize`), through
`ddpcheck lint`: what DDP wraps afterwards is still the project's network."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

MODEL = """\
import torch.nn as nn


class SpeechNet(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=(41, 11), stride=(2, 2)),
            nn.{norm}(32),
            nn.Hardtanh(0, 20, inplace=True),
        )
        self.fc = nn.Linear(32, hidden)

    def forward(self, x):
        return self.fc(self.conv(x).mean(dim=(2, 3)))
"""

TRAIN = """\
import os

import torch
import torch.distributed as dist
from apex import amp
from torch.nn.parallel import DistributedDataParallel

from nets.speech import SpeechNet


def train(cfg):
    dist.init_process_group("nccl")
    device_id = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(device_id)
    model = SpeechNet(hidden=cfg.hidden)
    {convert}
    model = model.to(torch.device("cuda", device_id))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    {initialize}
    model = DistributedDataParallel(model, device_ids=[device_id])
    return model, optimizer
"""

PAIR = "model, optimizer = amp.initialize(model, optimizer, opt_level=cfg.opt_level)"
ALONE = "model = amp.initialize(model, opt_level=cfg.opt_level)"


def _lint(tmp_path: Path, norm: str, initialize: str, convert: str = "") -> list[tuple[str, int]]:
    files = {"nets/__init__.py": "", "nets/speech.py": MODEL.format(norm=norm),
             "train.py": TRAIN.format(initialize=initialize, convert=convert)}
    return [(f["code"], f["location"]["line"]) for f in lint_project(tmp_path, files, "train.py", select="DDP012")]


def test_a_batchnorm_network_through_amp_initialize_with_its_optimizer_is_reported(tmp_path):
    assert _lint(tmp_path, "BatchNorm2d", PAIR) == [("DDP012", 20)]


def test_a_batchnorm_network_through_amp_initialize_alone_is_reported(tmp_path):
    assert _lint(tmp_path, "BatchNorm2d", ALONE) == [("DDP012", 20)]


def test_a_network_without_batchnorm_through_amp_initialize_stays_clean(tmp_path):
    assert _lint(tmp_path, "InstanceNorm2d", PAIR) == []


def test_a_converted_network_through_amp_initialize_stays_clean(tmp_path):
    convert = "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)"
    assert _lint(tmp_path, "BatchNorm2d", PAIR, convert) == []
