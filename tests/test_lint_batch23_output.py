"""Output and checkpoint codes on mechanisms seen on public scripts of batch 23 (DDP012, DDP019,
DDP020, DDP011): each through `ddpcheck lint` on a small project written in the style of the
scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, target, select=select))


# A segmentation zoo: a builder picks the network by name from a table and passes its keyword
# arguments on whole; the network builds its norm layers from the class it is given.
ZOO = {
    "nets/__init__.py": "",
    "nets/fcn.py": """\
        import torch.nn as nn


        class FCN(nn.Module):
            def __init__(self, num_class, norm_layer=nn.BatchNorm2d):
                super().__init__()
                self.conv = nn.Conv2d(3, 64, 3, padding=1)
                self.bn = norm_layer(64)
                self.head = nn.Conv2d(64, num_class, 1)

            def forward(self, x):
                return self.head(self.bn(self.conv(x)).relu())


        def get_fcn(num_class=19, **kwargs):
            return FCN(num_class, **kwargs)


        def get_fcn_small(num_class=19, **kwargs):
            return FCN(num_class, **kwargs)
    """,
    "nets/zoo.py": """\
        from .fcn import *

        __all__ = ["get_model"]


        def get_model(name, **kwargs):
            models = {"fcn": get_fcn, "fcn_small": get_fcn_small}
            return models[name](**kwargs)
    """,
}

SEG_SCRIPT = """\
    import argparse
    import torch
    import torch.nn as nn
    import torch.distributed as dist
    from nets.zoo import get_model


    class Trainer:
        def __init__(self, args):
            self.device = torch.device(f"cuda:{args.local_rank}")
            {norm}
            self.model = get_model(args.model, num_class=19, norm_layer=norm).to(self.device)
            if args.distributed:
                self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[args.local_rank])


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--distributed", action="store_true")
        parser.add_argument("--model", default="fcn")
        args = parser.parse_args()
        dist.init_process_group("nccl")
        Trainer(args)
"""


def test_network_given_syncbatchnorm_through_builders_is_silent(tmp_path: Path) -> None:
    files = {**ZOO, "train.py": SEG_SCRIPT.replace(
        "{norm}", "norm = nn.SyncBatchNorm if args.distributed else nn.BatchNorm2d")}
    assert lines(tmp_path, files, "DDP012") == []


def test_network_given_batchnorm_through_builders_is_reported(tmp_path: Path) -> None:
    files = {**ZOO, "train.py": SEG_SCRIPT.replace("{norm}", "norm = nn.BatchNorm2d")}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 14)]
