"""A project network picked by `eval("package.module." + args.arch)()`, through `ddpcheck lint`
(DDP012): the string names a class or builder function of that project module, so its code is
read as if it had been called by name."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

NETS = """\
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=1)
            self.norm = NORM

        def forward(self, x):
            return self.norm(self.conv(x)).relu()


    class Net(nn.Module):
        def __init__(self, depth, classes=10):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(16) for _ in range(depth)])
            self.head = nn.Linear(16, classes)

        def forward(self, x):
            return self.head(self.blocks(x).mean((2, 3)))


    def small_net(**kw):
        return Net(2, **kw)


    def large_net(**kw):
        return Net(8, **kw)
    """

TRAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    import models.nets


    def worker(gpu, args):
        dist.init_process_group("nccl", init_method="tcp://10.0.0.1:2345", rank=args.node * 8 + gpu,
                                world_size=args.world)
        torch.cuda.set_device(gpu)
        model = eval("models.nets." + args.arch)()
        model.cuda(gpu)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
        return model


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--arch", ARCH)
        parser.add_argument("--node", type=int, default=0)
        parser.add_argument("--world", type=int, default=16)
        args = parser.parse_args()
        mp.spawn(worker, args=(args,), nprocs=8)
    """


def _lint(tmp_path: Path, norm: str, arch: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {
        "models/__init__.py": "",
        "models/nets.py": NETS.replace("NORM", norm),
        "train.py": TRAIN.replace("ARCH", arch),
    })
    return finding_set(tmp_path, "train.py", select="DDP012")


def test_a_project_network_named_by_its_module_path_is_read(tmp_path: Path) -> None:
    assert _lint(tmp_path, "nn.BatchNorm2d(c)", 'default="small_net"') == {("train.py", 16, "DDP012")}


def test_every_name_an_option_may_hold_is_read(tmp_path: Path) -> None:
    assert _lint(tmp_path, "nn.BatchNorm2d(c)", 'default="large_net", choices=["small_net", "large_net"]') \
        == {("train.py", 16, "DDP012")}


def test_a_project_network_without_batchnorm_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "nn.GroupNorm(4, c)", 'default="small_net"') == set()


def test_a_name_the_lint_cannot_know_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "nn.BatchNorm2d(c)", "required=True") == set()
