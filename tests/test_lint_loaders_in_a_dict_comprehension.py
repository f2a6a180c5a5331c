"""Loaders built in a dict comprehension (`{split: DataLoader(sets[split], sampler=samplers[split])
for split in samplers}`) and read back by key in the training functions: an entry is what the
comprehension computes, whatever the key. Through `ddpcheck lint` on a small self-supervised
trainer whose shuffling DistributedSampler never gets its epoch; `set_epoch` keeps it clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

DATA = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def cifar_loaders(args, datasets):
        samplers = {"pretrain": None, "valid": None}
        if args.distributed:
            samplers = {"pretrain": DistributedSampler(datasets["pretrain"]), "valid": None}
        loaders = {split: DataLoader(datasets[split], sampler=samplers[split], num_workers=8,
                                     batch_size=args.batch_size, drop_last=True)
                   for split in samplers.keys()}
        return loaders


    def get_loaders(args, datasets):
        loaders = cifar_loaders(args, datasets)
        return loaders, args
"""

TRAIN = """\
    import torch


    def pretrain(encoder, loaders, optimizer, args):
        for epoch in range(args.n_epochs):
            encoder.train()
            for (x_i, x_j), _ in loaders["pretrain"]:
                loss = encoder(x_i.cuda(), x_j.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""

MAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from data import get_loaders
    from train import pretrain


    def main(args, datasets, net):
        args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
        if args.distributed:
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
            net = DistributedDataParallel(net.cuda(), device_ids=[local_rank])
        loaders, args = get_loaders(args, datasets)
        optimizer = torch.optim.SGD(net.parameters(), lr=args.lr)
        pretrain(net, loaders, optimizer, args)
"""


def test_a_loader_read_back_from_a_dict_comprehension_is_the_one_it_builds(tmp_path: Path) -> None:
    files = {"main.py": MAIN, "data.py": DATA, "train.py": TRAIN}
    assert lines(tmp_path, files, "DDP002", "main.py") == [("train.py", 5)]


def test_set_epoch_on_it_is_clean(tmp_path: Path) -> None:
    fixed = TRAIN.replace("            encoder.train()\n",
                          "            encoder.train()\n"
                          "            if args.distributed:\n"
                          "                loaders['pretrain'].sampler.set_epoch(epoch)\n")
    files = {"main.py": MAIN, "data.py": DATA, "train.py": fixed}
    assert lines(tmp_path, files, "DDP002", "main.py") == []
