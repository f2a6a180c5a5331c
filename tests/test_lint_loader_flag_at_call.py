"""A loader factory that adds a DistributedSampler only under `if distributed:`: the argument a
caller passes decides whether the loader it gets back is a shard (DDP036), through
`ddpcheck lint` on a small project written like a course script with a single-GPU and a
distributed mode, with the distributed variant still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import datasets, transforms


    def make_loaders(batch_size, distributed=False):
        tf = transforms.ToTensor()
        train_set = datasets.CIFAR10("./data", train=True, download=True, transform=tf)
        val_set = datasets.CIFAR10("./data", train=False, download=True, transform=tf)
        if distributed:
            train_sampler = DistributedSampler(train_set)
            val_sampler = DistributedSampler(val_set, shuffle=False)
        else:
            train_sampler = None
            val_sampler = None
        train_loader = DataLoader(train_set, batch_size=batch_size, sampler=train_sampler,
                                  shuffle=train_sampler is None)
        val_loader = DataLoader(val_set, batch_size=batch_size, sampler=val_sampler)
        return train_loader, val_loader, train_sampler


    def evaluate(model, loader):
        model.eval()
        hits, seen = 0, 0
        with torch.no_grad():
            for images, labels in loader:
                hits += (model(images).argmax(1) == labels).sum().item()
                seen += labels.size(0)
        return {"acc": 100.0 * hits / seen}


    def single_gpu(args, model):
        train_loader, val_loader, _ = make_loaders(args.batch_size, distributed=False)
        for epoch in range(args.epochs):
            metrics = evaluate(model, val_loader)
            print(f"epoch {epoch}: val acc {metrics['acc']:.2f}")


    def multi_gpu(args, model):
        dist.init_process_group("nccl")
        model = DDP(model.cuda())
        train_loader, val_loader, sampler = make_loaders(args.batch_size, distributed={flag})
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            metrics = evaluate(model, val_loader)
            stats = torch.tensor([metrics["acc"]], device="cuda")
            dist.all_reduce(stats)
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--mode", default="single")
        parser.add_argument("--batch-size", type=int, default=128)
        parser.add_argument("--epochs", type=int, default=10)
        args = parser.parse_args()
        model = torch.nn.Linear(3072, 10)
        if args.mode == "single":
            single_gpu(args, model)
        else:
            multi_gpu(args, model)
"""


def test_metric_of_the_loader_built_without_a_sampler_is_clean(tmp_path: Path) -> None:
    # `make_loaders(..., distributed=False)` takes the `else:` arm: the whole set on one process.
    files = {"train.py": SCRIPT.replace("{flag}", "True")}
    assert lines(tmp_path, files, "DDP036") == []


def test_metric_of_the_sharded_loader_is_still_reported(tmp_path: Path) -> None:
    # The single-GPU path now builds a shard too: its printed accuracy is one rank's.
    files = {"train.py": SCRIPT.replace("{flag}", "True").replace(
        "make_loaders(args.batch_size, distributed=False)", "make_loaders(args.batch_size, distributed=True)")}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 39)]
