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


# A self-supervised recipe that offsets its seed by the rank in `main()`, before the worker it
# calls sets up the process group: the helper returns 0 there on every rank.
DIST_UTILS = """\
    import torch.distributed as dist


    def is_dist_avail_and_initialized():
        if not dist.is_available():
            return False
        if not dist.is_initialized():
            return False
        return True


    def get_rank():
        if not is_dist_avail_and_initialized():
            return 0
        return dist.get_rank()
"""

SEED_BEFORE_INIT = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import datasets, transforms, models

    from utils import dist_utils

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--multiprocessing-distributed", action="store_true")
    parser.add_argument("--gpu", type=int, default=None)


    def main():
        args = parser.parse_args(){early}
        if args.seed is not None:
            seed = args.seed + dist_utils.get_rank()
            torch.manual_seed(seed)
        ngpus_per_node = torch.cuda.device_count()
        if args.multiprocessing_distributed:
            mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
        else:
            main_worker(args.gpu, ngpus_per_node, args)


    def main_worker(gpu, ngpus_per_node, args):
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl", init_method="env://")
        model = DDP(models.resnet18().cuda(gpu), device_ids=[gpu])
        train_set = datasets.ImageFolder("train", transforms.Compose([
            transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor()]))
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler, num_workers=8)
        for images, target in loader:
            model(images.cuda(gpu)).sum().backward()


    if __name__ == "__main__":
        main()
"""


def _seed_project(early: str = "", utils: str = DIST_UTILS) -> dict[str, str]:
    return {"train.py": SEED_BEFORE_INIT.format(early=early), "utils/__init__.py": "", "utils/dist_utils.py": utils}


def test_rank_read_before_the_group_exists_is_the_same_seed(tmp_path: Path) -> None:
    assert lines(tmp_path, _seed_project(), "DDP029") == [22]


def test_rank_read_after_the_group_is_set_up_stays_clean(tmp_path: Path) -> None:
    early = '\n        dist.init_process_group(backend="nccl", init_method="env://")'
    assert lines(tmp_path, _seed_project(early), "DDP029") == []


def test_rank_helper_reading_the_environment_stays_clean(tmp_path: Path) -> None:
    utils = """\
        import os


        def get_rank():
            return int(os.environ.get("RANK", 0))
    """
    assert lines(tmp_path, _seed_project(utils=utils), "DDP029") == []
