"""BatchNorm built in a class of the script that DDP never wraps (a frozen VGG-BN inside a
perceptual-loss module) says nothing about the wrapped network when that network is a project
class the model reads: DDP012 stays silent. Where the wrapped network is one the model cannot
name, or its class uses the BatchNorm-building class, the script's BatchNorm still counts.
Through `ddpcheck lint` on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.nn as nn
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
{imports}


class FeatureLoss(nn.Module):
    def __init__(self):
        super().__init__()
        extractor = torchvision.models.vgg16_bn(weights=None).features[:16]
        for p in extractor.parameters():
            p.requires_grad = False
        self.extractor = extractor

    def forward(self, fake, real):
        return nn.functional.l1_loss(self.extractor(fake), self.extractor(real))


class Painter(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.InstanceNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, 3, 3, padding=1))
{extra}
    def forward(self, x):
        return self.body(x)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    painter = {network}.cuda(local_rank)
    painter = DDP(painter, device_ids=[local_rank])
    criterion = FeatureLoss().cuda(local_rank)
    return painter, criterion


if __name__ == "__main__":
    main()
"""

USES_LOSS = """\
        self.critic = FeatureLoss()
"""


@pytest.mark.parametrize(("imports", "extra", "network", "reported"), [
    # The wrapped network is the script's own class: the loss class's VGG-BN is not in it.
    ("", "", "Painter()", False),
    # ... nor when it comes from another module of the project.
    ("from nets import Sketcher", "", "Sketcher()", False),
    # The wrapped class holds the loss module: its BatchNorm is wrapped too.
    ("", USES_LOSS, "Painter()", True),
    # A network from a hub the model cannot read: BatchNorm in the script may be in it.
    ("", "", 'torch.hub.load("org/repo", "painter")', True),
], ids=["script-class", "project-module-class", "holds-the-loss", "unknown-network"])
def test_batchnorm_of_a_loss_class_beside_the_wrapped_network(tmp_path, imports, extra, network, reported):
    nets = "import torch.nn as nn\n\n\nclass Sketcher(nn.Module):\n    def __init__(self):\n" \
           "        super().__init__()\n        self.conv = nn.Conv2d(3, 3, 3)\n"
    write_project(tmp_path, {"train.py": SCRIPT.format(imports=imports, extra=extra, network=network),
                             "nets.py": nets})
    found = finding_set(tmp_path, "train.py", select="DDP012")
    line = 1 + SCRIPT.format(imports=imports, extra=extra, network=network).splitlines().index(
        "    painter = DDP(painter, device_ids=[local_rank])")
    assert found == ({("train.py", line, "DDP012")} if reported else set())


def test_a_backbone_built_by_a_script_function_still_counts(tmp_path):
    # The BatchNorm-building call sits in a function, not a class apart: the class that calls it
    # holds the network (the fallback on BatchNorm built anywhere in the script applies).
    script = """\
import os
import torch
import torch.nn as nn
import torch.distributed as dist
import torchvision


def make_trunk(depth):
    return torchvision.models.resnet50() if depth == 50 else torchvision.models.resnet18()


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = make_trunk(50)
        self.head = nn.Linear(1000, 10)


local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
model = torch.nn.parallel.DistributedDataParallel(Classifier().cuda(), device_ids=[local_rank])
"""
    write_project(tmp_path, {"train.py": script})
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 22, "DDP012")}
