"""Which network a run builds, when a script picks its class by an option it first copies into a
plain name (`model_name = args.model_name`, then `if "CNN" in model_name:`): the branches the
command line's defaults do not take build nothing in a default run, for DDP012 (BatchNorm
without SyncBatchNorm) and DDP009 (a rank-0 forward of the DDP model, which broadcasts buffers
only when the network has some). The script sits in a folder of the project and reaches the
project's package through `sys.path.append(here.split("recipes")[0])`, the project root. Each
through `ddpcheck lint` on a small project."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

SPECTRAL = """\
    import torch
    import torch.nn as nn


    class SpectralNet(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.lift = nn.Linear(3, width)
            self.weights = nn.Parameter(torch.randn(width, width, dtype=torch.cfloat))
            self.proj = nn.Linear(width, 1)

        def forward(self, x):
            h = torch.fft.rfft(self.lift(x), dim=1)
            h = torch.fft.irfft(h @ self.weights, n=x.shape[1], dim=1)
            return self.proj(h)
"""

CONV = """\
    import torch.nn as nn


    class ConvNet(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.body = nn.Sequential(nn.Conv1d(3, width, 3, padding=1), nn.BatchNorm1d(width), nn.GELU())
            self.head = nn.Conv1d(width, 1, 1)

        def forward(self, x):
            return self.head(self.body(x.transpose(1, 2))).transpose(1, 2)
"""

TRAIN = """\
    import argparse
    import os
    import sys

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torchinfo import summary

    here = os.path.abspath(os.path.dirname(__file__))
    sys.path.append(os.path.join(here.split("recipes")[0]))

    from nets.conv import ConvNet
    from nets.spectral import SpectralNet

    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--model_name", default="{default}", type=str)
        parser.add_argument("--width", default=32, type=int)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model_name = args.model_name
        if "Spectral" in model_name:
            net = SpectralNet(args.width).cuda(local_rank)
        if "CNN" in model_name:
            net = ConvNet(args.width).cuda(local_rank)
        net = DDP(net, device_ids=[local_rank])
        if rank == 0:
            x = torch.randn(4, 64, 3).cuda(local_rank)
            print(summary(net, input_data=[x], verbose=0))
        dist.destroy_process_group()
"""


def _findings(tmp_path: Path, default: str) -> list[tuple[str, int]]:
    files = {"nets/__init__.py": "", "nets/spectral.py": SPECTRAL, "nets/conv.py": CONV,
             "recipes/flow/train.py": TRAIN.replace("{default}", default)}
    found = lint_project(tmp_path, files, "recipes/flow/train.py", select="DDP009,DDP012")
    return sorted((f["code"], f["location"]["line"]) for f in found)


def test_default_network_without_norm_layers_is_silent(tmp_path: Path) -> None:
    # The default run builds SpectralNet: no BatchNorm, no buffers for the rank-0 summary's
    # forward to broadcast.
    assert _findings(tmp_path, "Spectral") == []


def test_default_network_with_batchnorm_is_reported(tmp_path: Path) -> None:
    # The default run builds ConvNet: BatchNorm without SyncBatchNorm, and running statistics
    # that the rank-0 summary's forward broadcasts while the other ranks never join.
    assert _findings(tmp_path, "CNN") == [("DDP009", 33), ("DDP012", 30)]
