"""An attribute dict of settings that is later updated with another one holding the run's
objects in the same function (`args = AttrDict(vars(args))`, `args.update(AttrDict(
train_loader=loader, ...))`, then `conf = args` handed to the epoch helpers), through `ddpcheck lint` (DDP002): the
helper's `conf.train_loader` is the loader, so its epoch loop is followed. Any outside class
named `AttrDict` reads this way."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

HELPERS = """\
    def train_epoch(conf):
        conf.model.train()
        for x, y in conf.train_loader:
            conf.optimizer.zero_grad()
            conf.criterion(conf.model(x.cuda()), y.cuda()).backward()
            conf.optimizer.step()
    """

SCRIPT = """\
    import argparse

    import torch
    import torch.distributed as dist
    from cfgkit import AttrDict
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    from helpers import train_epoch


    def main(train_set):
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=10)
        args = AttrDict(vars(parser.parse_args()))
        dist.init_process_group("nccl")
        sampler = DistributedSampler(train_set, shuffle=True)
        loader = DataLoader(train_set, batch_sampler=BatchSampler(sampler, 32, drop_last=True))
        model = DDP(torch.nn.Linear(8, 2).cuda())
        conf = AttrDict(
            train_loader=loader,
            model=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            criterion=torch.nn.CrossEntropyLoss(),
        )
        args.update(conf)
        conf = args
        for epoch in range(1, args.epochs + 1):
    SET_EPOCH
            train_epoch(conf)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(None)
    """


def _lint(tmp_path: Path, set_epoch: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"helpers.py": HELPERS, "train.py": SCRIPT.replace("    SET_EPOCH", set_epoch)})
    return finding_set(tmp_path, "train.py", select="DDP002")


def test_the_loader_put_in_by_an_update_is_followed_into_the_helper(tmp_path: Path) -> None:
    assert _lint(tmp_path, "            conf.epoch = epoch") == {("train.py", 28, "DDP002")}


def test_the_same_run_setting_the_epoch_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "            sampler.set_epoch(epoch)") == set()
