"""Set-up mechanisms seen on public scripts of batch 19 (optimizers, launchers, devices): each
through `ddpcheck lint` on a small project written in the style of the scripts, with a variant
that must stay as it is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return [f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select)]


# A benchmark that times backward passes under a communication hook: the optimizer is built out
# of habit and never stepped.
TIMED_BACKWARD = """\
    import argparse
    import torch
    import torch.optim as optim
    import torch.distributed as dist
    from torchvision.models import resnet18

    def timed_phase(args, bsize):
        torch.cuda.set_device(args.local_rank)
        model = resnet18().to(args.local_rank)
        criterion = torch.nn.CrossEntropyLoss()
        optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
        data = torch.randn((bsize, 3, 32, 32))
        target = torch.randint(0, 9, [bsize])
        for step in range(100):
            loss = criterion(model(data), target)
            loss.backward(){step}

    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("nccl", init_method="env://")
        timed_phase(args, 64)
"""


def test_optimizer_never_stepped_has_no_rate_to_scale(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": TIMED_BACKWARD.format(step="")}, "DDP004") == []


def test_optimizer_stepped_keeps_its_finding(tmp_path: Path) -> None:
    code = TIMED_BACKWARD.format(step="\n            optimizer.step()")
    assert lines(tmp_path, {"train.py": code}, "DDP004") == [11]
