"""One epoch function for training and evaluation, chosen by an argument (`run_one_epoch("val",
...)` and `if phase == "train": loss.backward()`), through `ddpcheck lint` (DDP036): the
evaluation call's figures are one shard's, the training call's are not an evaluation metric."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli

SCRIPT = """\
    import logging
    import os

    import torch
    import torch.distributed as dist
    import torchvision
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler


    class AverageMeter:
        def __init__(self):
            self.sum = 0.0
            self.count = 0
            self.avg = 0.0

        def update(self, val, n=1):
            self.sum += val * n
            self.count += n
            self.avg = self.sum / self.count


    def run_one_epoch(phase, loader, model, criterion, optimizer):
        losses, accs = AverageMeter(), AverageMeter()
        for inputs, targets in loader:
            inputs, targets = inputs.cuda(), targets.cuda()
            if phase == "train":
                model.train()
                outputs = model(inputs)
                loss = criterion(outputs, targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                model.eval()
                with torch.no_grad():
                    outputs = model(inputs)
                    loss = criterion(outputs, targets)
            acc = (outputs.argmax(1) == targets).float().mean().item()
            losses.update(loss.item(), inputs.size(0))
            accs.update(acc, inputs.size(0))
        return losses.avg, accs.avg


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        train_set = torchvision.datasets.CIFAR10("data", train=True, download=True)
        test_set = torchvision.datasets.CIFAR10("data", train=False, download=True)
        train_sampler = DistributedSampler(train_set)
        train_loader = DataLoader(train_set, batch_size=128, sampler=train_sampler)
        test_loader = DataLoader(test_set, batch_size=128, sampler=DistributedSampler(test_set, shuffle=False))
        model = nn.parallel.DistributedDataParallel(torchvision.models.resnet18().cuda(), device_ids=[local_rank])
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        for epoch in range(100):
            train_sampler.set_epoch(epoch)
            train_loss, train_acc = run_one_epoch("train", train_loader, model, criterion, optimizer)
            val_loss, val_acc = run_one_epoch("val", test_loader, model, criterion, optimizer)
            if local_rank == 0:
                logging.info("train loss %.3f acc %.3f", train_loss, train_acc)
                logging.info("val loss %.3f acc %.3f", val_loss, val_acc)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _lines(tmp_path: Path, text: str) -> list[int]:
    (tmp_path / "train.py").write_text(textwrap.dedent(text))
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", "DDP036", "--output-format", "json",
                "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return [f["location"]["line"] for f in json.loads(r.stdout)["findings"]]


def _line_of(text: str, needle: str) -> int:
    return 1 + next(i for i, line in enumerate(textwrap.dedent(text).splitlines()) if needle in line)


def test_the_evaluation_call_reports_one_shard(tmp_path):
    assert _lines(tmp_path, SCRIPT) == [_line_of(SCRIPT, 'logging.info("val loss')]


def test_a_loop_that_trains_on_every_call_is_not_an_evaluation(tmp_path):
    # The backward runs whatever the phase: both calls train.
    always = SCRIPT.replace('            if phase == "train":\n', '            if True:\n')
    assert always != SCRIPT
    assert _lines(tmp_path, always) == []


def test_figures_reduced_after_the_call_are_not_reported(tmp_path):
    reduced = SCRIPT.replace(
        '            val_loss, val_acc = run_one_epoch("val", test_loader, model, criterion, optimizer)\n',
        '            val_loss, val_acc = run_one_epoch("val", test_loader, model, criterion, optimizer)\n'
        '            stats = torch.tensor([val_loss, val_acc], device="cuda")\n'
        '            dist.all_reduce(stats)\n'
        '            val_loss, val_acc = (stats / dist.get_world_size()).tolist()\n')
    assert reduced != SCRIPT
    assert _lines(tmp_path, reduced) == []
