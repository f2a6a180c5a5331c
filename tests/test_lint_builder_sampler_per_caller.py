"""A builder that makes a DistributedSampler for every set but hands it to the training loader
only: its evaluation callers get no padded sampler (DDP018). Through `ddpcheck lint` on small
projects in tmp_path."""

from __future__ import annotations


from tests.helpers import finding_set, write_project

SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_loader(size, tag):
    dataset = TensorDataset(torch.randn(size, 4), torch.randint(0, 2, (size,)))
    sampler = DistributedSampler(dataset, shuffle=(tag == "train"))
    if tag == "train":
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    else:
        loader = DataLoader(dataset, batch_size=8{val_sampler})
    return loader


def evaluate(model, loader):
    correct = torch.zeros(1)
    total = torch.zeros(1)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum()
            total += len(y)
    dist.all_reduce(correct)
    dist.all_reduce(total)
    return (correct / total).item()


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 2))
    train_loader = make_loader(512, "train")
    val_loader = make_loader(100, "val")
    for epoch in range(3):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        print(evaluate(model, val_loader))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _found(tmp_path, val_sampler):
    write_project(tmp_path, {"train.py": SCRIPT.format(val_sampler=val_sampler)})
    return finding_set(tmp_path, "train.py", select="DDP018")


def test_a_sampler_the_evaluation_calls_never_hand_to_a_loader_is_clean(tmp_path):
    assert _found(tmp_path, "") == set()


def test_a_sampler_the_evaluation_loader_takes_is_reported(tmp_path):
    assert _found(tmp_path, ", sampler=sampler") == {("train.py", 9, "DDP018")}
