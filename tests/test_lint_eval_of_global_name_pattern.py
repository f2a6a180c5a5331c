"""A network built with `eval(arch + "_sparse_" + dataset)(...)`: `eval` reads the script's
own names, so the builder is one of the functions it imports whose names fit the string's
literal pieces (DDP012 when every one builds BatchNorm). Through `ddpcheck lint` on a small
distillation project; a candidate without BatchNorm leaves the network unknown, and silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAIN = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from nets.resnet_sparse import resnet_56_sparse_cifar10, resnet_56_sparse_cifar100
    from nets.vgg_sparse import vgg_16_sparse_cifar10
    from nets.other import {other}


    class Trainer:
        def __init__(self, args):
            self.arch = args.arch
            self.dataset_type = args.dataset_type

        def build(self, rank):
            self.student = eval(self.arch + "_sparse_" + self.dataset_type)(gumbel_start_temperature=2.0)
            self.student = self.student.cuda()
            self.student = DDP(self.student, device_ids=[rank])

        def train(self, loader):
            opt = torch.optim.SGD(self.student.parameters(), lr=0.1)
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(self.student(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--arch", default="resnet_56")
        parser.add_argument("--dataset_type", default="cifar10")
        args = parser.parse_args()
        dist.init_process_group("nccl")
        trainer = Trainer(args)
        trainer.build(dist.get_rank())
"""

RESNET = """\
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=1)
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x):
            return self.bn(self.conv(x)).relu() + x


    def resnet_56_sparse_cifar10(gumbel_start_temperature=2.0):
        return nn.Sequential(nn.Conv2d(3, 16, 3), *[Block(16) for _ in range(27)])


    def resnet_56_sparse_cifar100(gumbel_start_temperature=2.0):
        return nn.Sequential(nn.Conv2d(3, 16, 3), *[Block(16) for _ in range(27)])
"""

VGG = """\
    import torch.nn as nn


    def vgg_16_sparse_cifar10(gumbel_start_temperature=2.0):
        return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
"""

OTHER = """\
    import torch.nn as nn


    def mlp_sparse_cifar10(gumbel_start_temperature=2.0):
        return nn.Sequential(nn.Linear(3072, 512), nn.LayerNorm(512), nn.Linear(512, 10))


    def load_cifar10(root):
        return root
"""


def _project(other: str) -> dict[str, str]:
    return {"train.py": TRAIN.replace("{other}", other), "nets/__init__.py": "",
            "nets/resnet_sparse.py": RESNET, "nets/vgg_sparse.py": VGG, "nets/other.py": OTHER}


def test_every_fitting_builder_with_batchnorm_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _project("load_cifar10"), "DDP012") == [("train.py", 18)]


def test_a_fitting_builder_without_batchnorm_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _project("mlp_sparse_cifar10"), "DDP012") == []
