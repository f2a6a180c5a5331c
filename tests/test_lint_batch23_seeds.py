"""The same seed on every rank (DDP029) where training draws nothing per sample, on mechanisms
seen on public scripts of batch 23: each through `ddpcheck lint` on a small project written in the
style of the scripts, with a variant that must still be reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str = "DDP029", target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, target, select=select))


# A toy regression set drawn once in the dataset's constructor; the sampler of the one-GPU path
# is a RandomSampler. `{item}` is what `__getitem__` returns.
SYNTHETIC = """\
    import argparse
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset, RandomSampler
    from torch.utils.data.distributed import DistributedSampler


    class ToyData(Dataset):
        def __init__(self, samples):
            self.samples = samples
            self.x = torch.randn(samples, 10)
            self.y = torch.randn(samples, 5)

        def __len__(self):
            return self.samples

        def __getitem__(self, index):
            return {item}


    def set_seed(args):
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--local_rank", type=int, default=-1)
        args = parser.parse_args()
        if args.local_rank != -1:
            dist.init_process_group("nccl")
        set_seed(args)
        data = ToyData(1000)
        if args.local_rank != -1:
            sampler = DistributedSampler(data)
        else:
            sampler = RandomSampler(data)
        loader = DataLoader(data, sampler=sampler, batch_size=32, num_workers=2)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 5).cuda())
        for x, y in loader:
            model(x.cuda()).sub(y.cuda()).pow(2).mean().backward()


    if __name__ == "__main__":
        main()
"""


def test_synthetic_set_drawn_in_dataset_constructor_is_no_draw(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SYNTHETIC.format(item="self.x[index], self.y[index]")}) == []


def test_noise_drawn_per_sample_is_reported(tmp_path: Path) -> None:
    item = "self.x[index] + 0.1 * torch.randn(10), self.y[index]"
    assert lines(tmp_path, {"train.py": SYNTHETIC.format(item=item)}) == [("train.py", 37)]


# The seed set in the launcher, which spawns a worker per GPU when there are several and trains
# in its own process otherwise.
SPAWN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms


    def worker(rank, world_size):
        {worker_seed}
        if world_size > 1:
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
        augment = transforms.Compose([transforms.RandomCrop(32), transforms.ToTensor()])
        data = load_images(augment)
        sampler = DistributedSampler(data) if world_size > 1 else None
        loader = DataLoader(data, sampler=sampler, batch_size=64, num_workers=4)
        model = torch.nn.parallel.DistributedDataParallel(build_model().cuda(rank), device_ids=[rank])
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x.cuda(rank)), y.cuda(rank)).backward()


    def main():
        torch.manual_seed(1234)
        if torch.cuda.device_count() > 1:
            gpus = torch.cuda.device_count()
            mp.spawn(worker, nprocs=gpus, args=(gpus,))
        else:
            worker(0, 1)


    if __name__ == "__main__":
        main()
"""


def test_seed_in_launcher_before_spawn_on_several_gpus_is_silent(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SPAWN.format(worker_seed="pass")}) == []


def test_seed_in_spawned_worker_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SPAWN.format(worker_seed="torch.manual_seed(1234)")}) == [("train.py", 9)]


# A project network with a loader of its own, in another module, that copies its weights; the
# training shuffles nothing per sample.
OWN_NETWORK = """\
    import torch
    from torch import nn


    class CaptionModel(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.proj = nn.Linear(width, width)

        def forward(self, x):
            return self.proj(x)

        @classmethod
        def from_pretrained(cls, path):
            model = cls(512)
            model.load_state_dict(torch.load(path))
            return model
"""

OWN_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from models.caption import CaptionModel

    torch.manual_seed(0)


    def main(resume):
        dist.init_process_group("nccl")
        if resume:
            model = CaptionModel.from_pretrained("checkpoint.pt")
        else:
            model = CaptionModel(512)
        model = torch.nn.parallel.DistributedDataParallel(model.cuda())
        loader = DataLoader(features, sampler=DistributedSampler(features), batch_size=32, shuffle=False)
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
"""


def test_project_network_loaded_through_its_own_from_pretrained_is_no_dropout(tmp_path: Path) -> None:
    files = {"train.py": OWN_SCRIPT, "models/__init__.py": "", "models/caption.py": OWN_NETWORK}
    assert lines(tmp_path, files) == []


def test_project_network_with_dropout_is_reported(tmp_path: Path) -> None:
    network = OWN_NETWORK.replace("self.proj(x)", "self.drop(self.proj(x))").replace(
        "self.proj = nn.Linear(width, width)", "self.proj = nn.Linear(width, width)\n            self.drop = nn.Dropout(0.1)")
    files = {"train.py": OWN_SCRIPT, "models/__init__.py": "", "models/caption.py": network}
    assert lines(tmp_path, files) == [("train.py", 7)]


# A task object that loads its YAML configuration in the constructor and seeds torch from it in
# a set-up method of another module.
TASK = """\
    import torch
    import torch.distributed as dist
    import yaml


    def load_config(path):
        with open(path) as ifs:
            return yaml.safe_load(ifs)


    class BaseTask:
        def __init__(self, cfg_file):
            self.cfg = load_config(cfg_file)

        def init_env(self):
            seed = self.cfg["SEED"]
            torch.manual_seed(seed)
            dist.init_process_group(backend="nccl")
            self.rank = dist.get_rank()
            self.cfg["RANK"] = self.rank
"""

TASK_SCRIPT = """\
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms

    from task import BaseTask


    class TrainTask(BaseTask):
        def train(self):
            augment = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.ToTensor()])
            data = load_faces(augment)
            loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=128, num_workers=4)
            model = torch.nn.parallel.DistributedDataParallel(build_backbone().cuda())
            for x, y in loader:
                model(x.cuda()).sum().backward()


    def main():
        task = TrainTask("train_config.yaml")
        task.init_env()
        task.train()


    if __name__ == "__main__":
        main()
"""


def test_seed_from_configuration_held_by_the_task_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": TASK_SCRIPT, "task.py": TASK}) == [("task.py", 17)]


def test_seed_offset_by_the_rank_in_the_configuration_is_silent(tmp_path: Path) -> None:
    task = TASK.replace('self.cfg["RANK"] = self.rank', 'self.cfg["SEED"] = self.cfg["SEED"] + self.rank')
    assert lines(tmp_path, {"train.py": TASK_SCRIPT, "task.py": task}) == []


# A K-FAC style ImageNet example: the ResNet depth is chosen by option, the flag set out of habit.
RESNET_CHOICE = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torchvision import models

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group(backend="nccl")
    if args.model.lower() == "resnet50":
        model = models.resnet50()
    elif args.model.lower() == "resnet101":
        model = models.{other}()
    model.cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank],
                                                      find_unused_parameters=True)
"""


def test_flag_on_one_of_several_torchvision_resnets_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": RESNET_CHOICE.format(other="resnet101")}, "DDP027") == [("train.py", 17)]


def test_flag_where_one_choice_has_auxiliary_heads_is_silent(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": RESNET_CHOICE.format(other="googlenet")}, "DDP027") == []
