"""Mechanisms seen on public scripts of batch 20 (DDP flags given through a kwargs dict, library
classifiers, forwards with parameter-free branches): each through `ddpcheck lint` on a small
project written in the style of the scripts, with a variant that must stay as it is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return [f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select)]


# A launcher benchmark that wraps a torchvision ResNet-50 with the flag out of habit.
TORCHVISION_BENCHMARK = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torchvision import models

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()

    def main():
        dist.init_process_group(backend="nccl", init_method="env://")
        torch.cuda.set_device(args.local_rank)
        model = models.{arch}()
        model.cuda()
        model = DDP(model, device_ids=[args.local_rank], output_device=args.local_rank, find_unused_parameters=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0125)

    main()
"""


def test_torchvision_resnet_with_the_flag_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": TORCHVISION_BENCHMARK.format(arch="resnet50")}, "DDP027") == [16]


def test_torchvision_inception_with_auxiliary_heads_stays_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": TORCHVISION_BENCHMARK.format(arch="inception_v3")}, "DDP027") == []


# A boilerplate that builds the DDP keywords in a dict and a model whose convolutions pool only
# under a configuration flag.
MNIST_MODEL = """\
    import torch
    from torch import nn
    from torch.nn import functional as F

    class MNISTNet(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.convs = nn.ModuleList()
            for param in config.conv_params:
                self.convs.append(nn.Conv2d(param.in_channels, param.out_channels, param.kernel_size))
            self.dropout1 = nn.Dropout(config.dropout)
            self.fc1 = nn.Linear(config.flat, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            for i, conv in enumerate(self.convs):
                x = F.relu(conv(x))
                if self.config.conv_params[i].pooling:
                    x = F.max_pool2d(x, self.config.conv_params[i].pooling)
                x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            {last}
            return F.log_softmax(x, dim=1)
"""

KWARGS_FACTORY = """\
    import torch
    from torch import distributed as dist, optim
    from torch.nn.parallel import DistributedDataParallel as DDP

    from model import MNISTNet


    def get_model(config, device):
        model = MNISTNet(config)
        model = model.to(device)
        return model


    def create_training_objects(config, device, local_rank):
        model = get_model(config, device)
        optimizer = optim.Adam(model.parameters(), lr=config.lr)
        if dist.is_initialized():
            dist.barrier()
            kwargs = {"find_unused_parameters": True}
            if local_rank is not None:
                kwargs["device_ids"] = [local_rank]
            model = DDP(model, **kwargs)
        return model, optimizer
"""


def test_flag_in_kwargs_dict_with_layer_free_branch_is_reported(tmp_path: Path) -> None:
    files = {"model.py": MNIST_MODEL.format(last="x = self.fc2(x)"), "train.py": KWARGS_FACTORY}
    assert lines(tmp_path, files, "DDP027") == [19]


def test_branch_that_skips_a_layer_stays_clean(tmp_path: Path) -> None:
    last = "if self.config.head:\n                x = self.fc2(x)"
    files = {"model.py": MNIST_MODEL.format(last=last), "train.py": KWARGS_FACTORY}
    assert lines(tmp_path, files, "DDP027") == []


def test_flag_false_in_kwargs_dict_stays_clean(tmp_path: Path) -> None:
    files = {"model.py": MNIST_MODEL.format(last="x = self.fc2(x)"),
             "train.py": KWARGS_FACTORY.replace('"find_unused_parameters": True', '"find_unused_parameters": False')}
    assert lines(tmp_path, files, "DDP027") == []


def test_torchvision_resnet_with_a_head_of_the_project_stays_clean(tmp_path: Path) -> None:
    code = TORCHVISION_BENCHMARK.format(arch="resnet50").replace(
        "        model.cuda()\n", "        model.fc = Head(2048)\n        model.cuda()\n")
    assert lines(tmp_path, {"train.py": code, "heads.py": "class Head:\n    pass\n"}, "DDP027") == []


def test_torchvision_resnet_with_a_torch_head_is_reported(tmp_path: Path) -> None:
    code = TORCHVISION_BENCHMARK.format(arch="resnet50").replace(
        "        model.cuda()\n", "        model.fc = torch.nn.Linear(2048, 10)\n        model.cuda()\n")
    assert lines(tmp_path, {"train.py": code}, "DDP027") == [17]
