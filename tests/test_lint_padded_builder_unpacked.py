"""A loader builder that names its one sampler after training and that the script also calls for
the validation set, unpacking what it returns (`val_sampler, val_loader = make_sampler_and_loader(
args, ds)`), through `ddpcheck lint` (DDP018): the names the call is unpacked to say which set it
builds."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def make_sampler_and_loader(args, dataset):
        kwargs = {"num_workers": 4, "pin_memory": True} if args.cuda else {}
        if args.cuda:
            train_sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(),
                                               rank=dist.get_rank())
        else:
            train_sampler = DistributedSampler(dataset)
        train_loader = DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler, **kwargs)
        return train_sampler, train_loader


    def validate(model, loader, criterion):
        total = torch.zeros(2, device="cuda")
        with torch.no_grad():
            for x, y in loader:
                total[0] += criterion(model(x.cuda()), y.cuda()) * x.size(0)
                total[1] += x.size(0)
        dist.all_reduce(total)
        return (total[0] / total[1]).item()


    def main(args, xs, ys, vx, vy, model, criterion, optimizer):
        dist.init_process_group("nccl")
        model = DDP(model.cuda())
        train_sampler, train_loader = make_sampler_and_loader(args, TensorDataset(xs, ys))
        val_sampler, val_loader = make_sampler_and_loader(args, TensorDataset(vx, vy))
        for epoch in range(args.epochs):
            train_sampler.set_epoch(epoch)
            for x, y in train_loader:
                optimizer.zero_grad()
                criterion(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            print(epoch, validate(model, val_loader, criterion))
    """


def test_builder_unpacked_to_validation_names_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": SCRIPT})
    assert finding_set(tmp_path, "train.py", select="DDP018") == {("train.py", 10, "DDP018"),
                                                                  ("train.py", 13, "DDP018")}


def test_builder_used_for_training_only_clean(tmp_path: Path) -> None:
    train_only = SCRIPT.replace(
        "        val_sampler, val_loader = make_sampler_and_loader(args, TensorDataset(vx, vy))\n",
        "        val_loader = DataLoader(TensorDataset(vx, vy), batch_size=64)\n")
    write_project(tmp_path, {"train.py": train_only})
    assert finding_set(tmp_path, "train.py", select="DDP018") == set()


def test_builder_that_drops_the_last_uneven_samples_clean(tmp_path: Path) -> None:
    dropping = SCRIPT.replace("rank=dist.get_rank())", "rank=dist.get_rank(), drop_last=True)").replace(
        "DistributedSampler(dataset)\n", "DistributedSampler(dataset, drop_last=True)\n")
    write_project(tmp_path, {"train.py": dropping})
    assert finding_set(tmp_path, "train.py", select="DDP018") == set()
