"""DDP012 on the ways batch 19's scripts name their networks: a builder function looked up by
name in a package that re-exports its modules, and a model wrapped in a method that replaces the
attribute it reads. Each through `ddpcheck lint` on a small project written in the style of the
scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each DDP012 finding when `target` is linted."""
    return [(Path(f["path"]).name, f["location"]["line"]) for f in lint_project(tmp_path, files, target, select="DDP012")]


# A CIFAR model zoo: a package whose `__init__` re-exports each module, networks made by builder
# functions (`def ResNet18(): return ResNet(...)`), picked with `getattr(package, name)()`.
ZOO_INIT = """\
    from .mlp import *
    from .resnet import *
"""

ZOO_RESNET = """\
    import torch.nn as nn


    class BasicBlock(nn.Module):
        def __init__(self, planes):
            super().__init__()
            self.conv = nn.Conv2d(planes, planes, 3, padding=1)
            self.bn = nn.BatchNorm2d(planes)

        def forward(self, x):
            return self.bn(self.conv(x)).relu()


    class ResNet(nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.blocks = nn.Sequential(*[BasicBlock(3) for _ in range(depth)])

        def forward(self, x):
            return self.blocks(x)


    def ResNet18():
        return ResNet(8)
"""

ZOO_MLP = """\
    import torch.nn as nn


    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(3072, 10), nn.LayerNorm(10))

        def forward(self, x):
            return self.net(x)


    def TinyMLP():
        return MLP()
"""

ZOO_SCRIPT = """\
    import torch
    import torch.distributed as dist
    import cifar_architectures


    def ddp_training(local_rank, network_name):
        torch.cuda.set_device(local_rank)
        model = getattr(cifar_architectures, network_name)()
        model.to(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        return model


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        ddp_training(0, "{name}")
"""


def zoo(name: str) -> dict[str, str]:
    return {"train.py": ZOO_SCRIPT.format(name=name), "cifar_architectures/__init__.py": ZOO_INIT,
            "cifar_architectures/resnet.py": ZOO_RESNET, "cifar_architectures/mlp.py": ZOO_MLP}


def test_a_builder_function_a_package_re_exports_is_read_by_the_name_it_is_given(tmp_path: Path) -> None:
    assert lines(tmp_path, zoo("ResNet18")) == [("train.py", 10)]


def test_a_builder_of_the_same_package_without_batchnorm_stays_clean(tmp_path: Path) -> None:
    # Only the network the name picks counts, not its neighbours in the package.
    assert lines(tmp_path, zoo("TinyMLP")) == []


# A trainer class: the constructor builds the network by the `--model` option from a package
# that re-exports its modules; a later method wraps `self.model` and stores the wrapper in it.
TRAINER = """\
    import torch
    import models


    class BaseTrainer:
        def __init__(self, config):
            self.config = config
            self.model = self.build_model(config)
            self.handle_ddp_training()

        def build_model(self, config):
            return models.__dict__[config.model]()

        def handle_ddp_training(self):
            self.model.to(self.config.local_rank)
            self.model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[self.config.local_rank])
"""

TRAINER_SCRIPT = """\
    import argparse
    import torch.distributed as dist
    import trainer

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="{name}")
    parser.add_argument("--local_rank", type=int, default=0)
    config = parser.parse_args()
    dist.init_process_group("nccl")
    trainer.BaseTrainer(config)
"""


def trainer(name: str, init: str = ZOO_INIT) -> dict[str, str]:
    return {"train.py": TRAINER_SCRIPT.format(name=name), "trainer.py": TRAINER, "models/__init__.py": init,
            "models/resnet.py": ZOO_RESNET, "models/mlp.py": ZOO_MLP}


def test_a_model_wrapped_in_the_method_that_replaces_it_is_the_one_the_constructor_built(tmp_path: Path) -> None:
    assert lines(tmp_path, trainer("ResNet18")) == [("trainer.py", 16)]


def test_the_wrapped_model_without_batchnorm_stays_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, trainer("TinyMLP")) == []


def test_a_name_that_picks_no_network_reads_every_module_the_package_re_exports(tmp_path: Path) -> None:
    # `--model resnet` names the submodule, not a network: the choice is open, and the package
    # holds BatchNorm networks (as a single module of many networks would).
    assert lines(tmp_path, trainer("resnet")) == [("trainer.py", 16)]


def test_a_package_whose_re_exported_modules_build_no_batchnorm_stays_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, trainer("resnet", init="from .mlp import *\n")) == []


# The architecture option is declared by a library's parser (`init_config(parser=parser)`), so
# no default is in sight; the script's docstring documents the commands that run it, and the
# network is built by evaluating a string that calls the library's constructor.
DOCUMENTED = '''\
    """
    Trains a torchvision model on ImageNet with DDP when started by torchrun.

    Example:

        python train_ddp.py -d imagenet --arch {arch} --name scratch -e 90 -b 128

        torchrun --standalone --nproc_per_node=4 train_ddp.py -d imagenet \\
        {second} --name scratch-ddp -e 50 -b 512
    """
    import argparse
    import os
    import torch
    import torch.distributed as dist
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ppuda.config import init_config


    def main():
        parser = argparse.ArgumentParser(description="ImageNet training")
        parser.add_argument("--bce", action="store_true")
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        args = init_config(mode="train_net", parser=parser)
        model = eval(f"torchvision.models.{{args.arch}}()")
        model = DDP(model.to(rank), device_ids=[rank])
        return model


    if __name__ == "__main__":
        main()
'''


def documented(arch: str, second: str | None = None) -> dict[str, str]:
    return {"train_ddp.py": DOCUMENTED.format(arch=arch, second=f"--arch {arch}" if second is None else second)}


def test_an_option_declared_out_of_sight_takes_the_value_every_documented_command_gives(tmp_path: Path) -> None:
    assert lines(tmp_path, documented("resnet50"), "train_ddp.py") == [("train_ddp.py", 27)]


def test_a_documented_network_without_batchnorm_stays_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, documented("vit_b_16"), "train_ddp.py") == []


def test_a_documented_command_without_the_option_leaves_the_network_unknown(tmp_path: Path) -> None:
    # That command runs with the library's default, which nothing here shows.
    assert lines(tmp_path, documented("resnet50", second="--amp"), "train_ddp.py") == []


EVALUATED = """\
    import argparse
    import torch.distributed as dist
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="{arch}")
    args = parser.parse_args()
    dist.init_process_group("nccl")
    model = DDP(eval(f"torchvision.models.{{args.arch}}(num_classes=100)").cuda())
"""


def test_a_string_that_calls_the_library_constructor_builds_the_network_it_names(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": EVALUATED.format(arch="resnet18")}) == [("train.py", 10)]


def test_a_string_that_calls_a_network_without_batchnorm_stays_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": EVALUATED.format(arch="swin_t")}) == []
