"""A DDP forward reached through a method of another object of the project (`restorer.infer(x)`
of a model class whose `infer` calls `self.net(x)`, the wrapper it holds): a collective when the
network holds buffers, which DDP broadcasts on each forward with gradients on. DDP034: a strided
loop of such calls (`for i in range(rank, n, world_size):`) runs a different number of them on
the ranks; with gradients off, only the first forward after training broadcasts, and a network
without buffers has nothing to send. Through `ddpcheck lint` on a small project."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

NETS = """\
    import torch.nn as nn


    class Restorer(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), {norm}, nn.ReLU(),
                                      nn.Conv2d(width, 3, 3, padding=1))

        def forward(self, x):
            return x + self.body(x)
"""

WRAPPER = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nets import Restorer


    class RestorationModel:
        def __init__(self, local_rank, distributed):
            self.net = Restorer(32).cuda(local_rank)
            if distributed:
                self.net = DDP(self.net, device_ids=[local_rank])
            self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-4)

        def train_step(self, noisy, clean):
            self.net.train()
            loss = (self.net(noisy) - clean).abs().mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

        def infer(self, frames):
            self.net.eval()
            {infer}
"""

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist

    from wrapper import RestorationModel


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        rank, world_size = dist.get_rank(), dist.get_world_size()
        restorer = RestorationModel(local_rank, True)
        clips = [torch.randn(4, 3, 64, 64) for _ in range(37)]
        for step in range(1000):
            noisy = torch.randn(8, 3, 64, 64).cuda()
            restorer.train_step(noisy, noisy)
            if step % 100 == 0:
                for i in range(rank, len(clips), world_size):
                    restored = restorer.infer(clips[i].cuda())
                    torch.save(restored.cpu(), f"clip_{i}.pt")
                if rank == 0:
                    print(restorer.infer(clips[0].cuda()).mean().item())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

FORWARD = "return self.net(frames)"
NO_GRAD = "with torch.no_grad():\n                return self.net(frames)"


def _findings(tmp_path: Path, norm: str, infer: str) -> list[tuple[str, int]]:
    files = {"nets.py": NETS.replace("{norm}", norm), "wrapper.py": WRAPPER.replace("{infer}", infer),
             "train.py": TRAIN}
    found = lint_project(tmp_path, files, "train.py", select="DDP034")
    return sorted((f["code"], f["location"]["line"]) for f in found)


def test_forward_of_a_network_with_buffers_through_a_method_is_a_collective(tmp_path: Path) -> None:
    assert _findings(tmp_path, "nn.BatchNorm2d(width)", FORWARD) == [("DDP034", 20)]


def test_forward_with_gradients_off_broadcasts_once_and_the_loop_is_even(tmp_path: Path) -> None:
    assert _findings(tmp_path, "nn.BatchNorm2d(width)", NO_GRAD) == []


def test_network_without_buffers_makes_no_collective(tmp_path: Path) -> None:
    assert _findings(tmp_path, "nn.GroupNorm(4, width)", FORWARD) == []
