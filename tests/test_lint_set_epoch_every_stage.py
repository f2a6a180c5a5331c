"""One DataLoader construction read by the epoch loops of several training stages (a table of
loaders made in one comprehension, pretraining on one entry and fine-tuning on another): each
stage's epoch loop is a place `set_epoch` goes, so each is reported (DDP002). One stage whose
loop hands the loader to a per-epoch helper is still one finding. Through `ddpcheck lint` on
small projects in tmp_path."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

DATA = """\
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loaders(sets, batch_size):
    samplers = {"pretext": DistributedSampler(sets["pretext"]), "labelled": DistributedSampler(sets["labelled"])}
    return {name: DataLoader(sets[name], batch_size=batch_size, sampler=samplers[name])
            for name in ("pretext", "labelled")}
"""

STAGES = """\
import os
import torch
import torch.distributed as dist
from data import make_loaders


def pretext_stage(net, loaders, epochs):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(epochs):
        for views, _ in loaders["pretext"]:
            loss = net(views.cuda()).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def labelled_stage(net, loaders, epochs):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    for epoch in range(epochs):
        for images, labels in loaders["labelled"]:
            loss = torch.nn.functional.cross_entropy(net(images.cuda()), labels.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 10).cuda())
    loaders = make_loaders(load_sets(), 64)
    pretext_stage(net, loaders, 100)
    labelled_stage(net, loaders, 20)


if __name__ == "__main__":
    main()
"""


def test_each_stage_that_reads_a_loader_of_the_table_needs_its_set_epoch(tmp_path):
    write_project(tmp_path, {"train.py": STAGES, "data.py": DATA})
    assert finding_set(tmp_path, "train.py", select="DDP002") == {("train.py", 9, "DDP002"), ("train.py", 19, "DDP002")}


HELPER = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def run_epoch(net, loader, optimizer):
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(net(images.cuda()), labels.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 10).cuda())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    train_set = load_train_set()
    loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set))
    for epoch in range(30):
        run_epoch(net, loader, optimizer)


if __name__ == "__main__":
    main()
"""


def test_an_epoch_loop_that_hands_the_loader_to_a_helper_is_one_finding(tmp_path):
    # The helper's own loop is the epoch, run from the caller's loop: one place to fix.
    write_project(tmp_path, {"train.py": HELPER})
    assert finding_set(tmp_path, "train.py", select="DDP002") == {("train.py", 23, "DDP002")}


def test_stages_whose_loaders_set_their_epoch_are_clean(tmp_path):
    fixed = STAGES.replace('        for views, _ in loaders["pretext"]:',
                           '        loaders["pretext"].sampler.set_epoch(epoch)\n'
                           '        for views, _ in loaders["pretext"]:') \
        .replace('        for images, labels in loaders["labelled"]:',
                 '        loaders["labelled"].sampler.set_epoch(epoch)\n'
                 '        for images, labels in loaders["labelled"]:')
    write_project(tmp_path, {"train.py": fixed, "data.py": DATA})
    assert finding_set(tmp_path, "train.py", select="DDP002") == set()
