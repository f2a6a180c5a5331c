"""Padded evaluation sampler (DDP018) made by a loader builder whose callers choose `drop_last`:
`def make_loader(ds, drop_last, bs): sampler = DistributedSampler(ds, drop_last=drop_last)`,
called with a computed value for the training set and `drop_last=False` for the test set. The
sampler pads on the test call's run, and the test loss sums are all-reduced with the repeats.
Through `ddpcheck lint`, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


BUILDER_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def make_loader(dataset, drop_last, batch_size):
        sampler = DistributedSampler(dataset, drop_last=drop_last)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


    def run(opts):
        train_loader = make_loader(train_set, drop_last=len(train_set) >= 100, batch_size=opts.bs)
        test_loader = make_loader(test_set, drop_last={test_drop}, batch_size=opts.bs)
        gpu = int(os.environ["LOCAL_RANK"])
        net = DistributedDataParallel(Net().cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.SGD(net.parameters(), lr=opts.lr)
        for epoch in range(opts.epochs):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            sums = torch.zeros(2).cuda()
            with torch.no_grad():
                for x, y in test_loader:
                    sums[0] += torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda()).item() * x.size(0)
                    sums[1] += x.size(0)
            dist.all_reduce(sums)
            if gpu == 0:
                print("test loss", (sums[0] / sums[1]).item())


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        run(parse())
"""


def test_builder_sampler_padding_on_the_test_call_is_reported(tmp_path: Path) -> None:
    files = {"train.py": BUILDER_SCRIPT.format(test_drop="False")}
    assert lines(tmp_path, files, "DDP018") == [("train.py", 9)]


def test_builder_sampler_dropping_on_the_test_call_is_clean(tmp_path: Path) -> None:
    # The test call asks for `drop_last=True`: only the training call may pad.
    files = {"train.py": BUILDER_SCRIPT.format(test_drop="True")}
    assert lines(tmp_path, files, "DDP018") == []


def test_builder_padding_only_for_the_training_call_is_clean(tmp_path: Path) -> None:
    # Swapped: the training set's call pads, the test set's drops; the training loader's repeats
    # are harmless.
    source = BUILDER_SCRIPT.format(test_drop="True").replace(
        "drop_last=len(train_set) >= 100", "drop_last=False")
    assert lines(tmp_path, {"train.py": source}, "DDP018") == []
