"""Data-loading rules on mechanisms seen on public scripts of batch 21: an epoch counter that is
the loop's own target (DDP002), a torch.distributed stand-in imported in its place (DDP018,
DDP005), and a DistributedSampler subclass that evens nothing out (DDP018, DDP034). Each through
`ddpcheck lint` on a small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A d2l-style trainer whose epoch loop binds `self.epoch` itself; the epoch's method hands it to
# the sampler.
TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, max_epochs, rank):
            self.max_epochs = max_epochs
            self.rank = rank

        def fit(self, model, data):
            self.model = DistributedDataParallel(model.to(self.rank), device_ids=[self.rank])
            self.optim = torch.optim.Adam(self.model.parameters(), lr=0.002)
            self.train_dataloader = DataLoader(data, batch_size=64, shuffle=False,
                                               sampler=DistributedSampler(data, drop_last=True))
            self.epoch = 0
            {loop}
                self.fit_epoch()

        def fit_epoch(self):
            self.model.train()
            self.train_dataloader.sampler.set_epoch(self.epoch)
            for x, y in self.train_dataloader:
                self.optim.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optim.step()


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        Trainer(20, rank).fit(torch.nn.Linear(8, 1), make_data())
        dist.destroy_process_group()


    if __name__ == "__main__":
        torch.multiprocessing.spawn(worker, args=(2,), nprocs=2)
"""


def test_epoch_attribute_bound_by_the_epoch_loop_is_clean(tmp_path: Path) -> None:
    files = {"train.py": TRAINER.format(loop="for self.epoch in range(self.max_epochs):")}
    assert lines(tmp_path, files, "DDP002") == []


def test_epoch_attribute_never_advanced_is_reported(tmp_path: Path) -> None:
    # The loop counts with its own name; `self.epoch` stays 0: the same order every epoch.
    files = {"train.py": TRAINER.format(loop="for epoch in range(self.max_epochs):")}
    assert lines(tmp_path, files, "DDP002") == [("train.py", 24)]


# A loader builder for both splits and a script that reduces the evaluation's loss sums to rank 0,
# with torch.distributed or HFAI's drop-in replacement for it.
BUILDER = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def get_dataloader(name, batch_size, mode="train"):
        data = SeriesSet(name, split=mode)
        datasampler = DistributedSampler(data, shuffle=True{drop})
        return DataLoader(data, batch_size=batch_size, sampler=datasampler)
"""

REDUCING_SCRIPT = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel
    import {dist} as dist
    from data import get_dataloader


    def evaluate(model, criterion, eval_loader):
        loss, total = torch.zeros(2).cuda()
        model.eval()
        with torch.no_grad():
            for x, y in eval_loader:
                loss += criterion(model(x.cuda()), y.cuda())
                total += y.size(0)
        for t in [loss, total]:
            dist.reduce(t, 0)
        return loss.item() / total.item()


    def main(local_rank, world_size):
        dist.init_process_group(backend="nccl", init_method="env://", world_size=world_size, rank=local_rank)
        torch.cuda.set_device(local_rank)
        train_loader = get_dataloader("ETTh1", 32, mode="train")
        val_loader = get_dataloader("ETTh1", 32, mode="val")
        model = DistributedDataParallel(Net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        criterion = torch.nn.MSELoss()
        for epoch in range(10):
            train_loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                criterion(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            print(evaluate(model, criterion, val_loader))


    if __name__ == "__main__":
        torch.multiprocessing.spawn(main, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
"""


def test_stand_in_distributed_module_reduces_a_padded_evaluation(tmp_path: Path) -> None:
    files = {"data.py": BUILDER.format(drop=""), "train.py": REDUCING_SCRIPT.format(dist="hfai.nccl.distributed")}
    assert lines(tmp_path, files, "DDP018") == [("data.py", 7)]


def test_stand_in_distributed_module_init_without_destroy(tmp_path: Path) -> None:
    files = {"data.py": BUILDER.format(drop=""), "train.py": REDUCING_SCRIPT.format(dist="hfai.nccl.distributed")}
    assert lines(tmp_path, files, "DDP005") == [("train.py", 20)]


def test_stand_in_distributed_module_dropping_sampler_is_clean(tmp_path: Path) -> None:
    files = {"data.py": BUILDER.format(drop=", drop_last=True"),
             "train.py": REDUCING_SCRIPT.format(dist="hfai.nccl.distributed")}
    assert lines(tmp_path, files, "DDP018") == []


def test_unknown_distributed_module_is_not_read_as_torch(tmp_path: Path) -> None:
    # A module the model does not know stays unknown: nothing is claimed from its calls.
    files = {"data.py": BUILDER.format(drop=""), "train.py": REDUCING_SCRIPT.format(dist="mycluster.comm")}
    assert lines(tmp_path, files, "DDP018,DDP005") == []


# A worker run by mp.spawn (its first parameter is the process index) or called with -1 for a
# single-GPU run; the loader builder adds the sampler only when the rank is not -1.
SPAWN_BUILDER = """\
    import torch
    from torch.utils.data import DataLoader


    def create_dataloader(cfg, dataset, local_rank):
        batch_size = cfg.batch_size // cfg.nprocs
        sampler = torch.utils.data.distributed.DistributedSampler(dataset) if local_rank != -1 else None
        return DataLoader(dataset, batch_size=batch_size, num_workers=4, sampler=sampler, pin_memory=True)
"""

SPAWN_SCRIPT = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from data import create_dataloader


    def reduce_tensor(t):
        rt = t.clone()
        dist.all_reduce(rt, op=dist.ReduceOp.SUM)
        return rt / dist.get_world_size()


    def validate(loader, model):
        model.eval()
        with torch.no_grad():
            for x, y in loader:
                acc = (model(x.cuda()).argmax(1) == y.cuda()).float().mean()
                acc = reduce_tensor(acc)
        return acc


    def main_worker(local_rank, nprocs, cfg, train_set, val_set):
        cfg.local_rank = local_rank
        if local_rank != -1:
            dist.init_process_group("nccl", init_method=cfg.url, world_size=nprocs, rank=local_rank)
            torch.cuda.set_device(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(Net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        train_loader = create_dataloader(cfg, train_set, cfg.local_rank)
        val_loader = create_dataloader(cfg, val_set, cfg.local_rank)
        for epoch in range(cfg.epochs):
            train_loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            print(validate(val_loader, model))
        dist.destroy_process_group()


    if __name__ == "__main__":
        cfg = read_config()
        if cfg.use_ddp:
            mp.spawn(main_worker, nprocs=cfg.nprocs, args=(cfg.nprocs, cfg, TrainSet(), ValSet()))
        else:
            main_worker(-1, 1, cfg, TrainSet(), ValSet())
"""


def test_single_process_worker_only_called_with_minus_one_is_clean(tmp_path: Path) -> None:
    # Without the spawn, -1 is the only rank the worker is ever given: no sampler is made.
    files = {"data.py": SPAWN_BUILDER, "train.py": SPAWN_SCRIPT.replace(
        "if cfg.use_ddp:\n            mp.spawn(main_worker, nprocs=cfg.nprocs, args=(cfg.nprocs, cfg, TrainSet(), ValSet()))\n"
        "        else:\n            main_worker", "if True:\n            main_worker")}
    assert "mp.spawn(main_worker" not in files["train.py"]
    assert lines(tmp_path, files, "DDP018") == []


# An evaluation sampler that keeps every sample once: torch's DistributedSampler with the total
# set to the dataset's length (the ranks past `len % world_size` get one sample fewer).
EVAL_SAMPLER = """\
    from torch.utils.data import DistributedSampler


    class DistributedEvalSampler(DistributedSampler):
        def __init__(self, dataset, shuffle=False, seed=0):
            super().__init__(dataset, seed=seed, shuffle=shuffle, drop_last=False)
            if len(self.dataset) % self.num_replicas != 0:
                if self.rank >= len(self.dataset) % self.num_replicas:
                    self.num_samples -= 1
                {total}
"""

EVAL_DATA = """\
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    from sampler import DistributedEvalSampler


    def get_loaders(train_set, val_set, batch_size, is_distributed):
        train_sampler = DistributedSampler(train_set) if is_distributed else None
        train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=not is_distributed, sampler=train_sampler)
        val_sampler = DistributedEvalSampler(val_set, shuffle=False) if is_distributed else None
        val_loader = DataLoader(val_set, batch_size=batch_size, shuffle=False, sampler=val_sampler)
        return train_loader, val_loader
"""

EVAL_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from data import get_loaders


    def validate(loader, model):
        correct, seen = 0, 0
        model.eval()
        with torch.no_grad():
            for x, y in loader:
                out = model(x.cuda())
                stats = torch.tensor([(out.argmax(1) == y.cuda()).sum().item(), y.size(0)], device="cuda")
                {reduce}
                correct += stats[0].item()
                seen += stats[1].item()
        return correct / seen


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(Net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader, val_loader = get_loaders(TrainSet(), ValSet(), 64, True)
        for epoch in range(90):
            train_loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            print(validate(val_loader, model))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _eval_files(total: str, reduce: str) -> dict[str, str]:
    return {"sampler.py": EVAL_SAMPLER.format(total=total), "data.py": EVAL_DATA,
            "train.py": EVAL_SCRIPT.format(reduce=reduce)}


def test_unpadded_eval_sampler_with_a_collective_per_batch_is_uneven(tmp_path: Path) -> None:
    files = _eval_files("self.total_size = len(self.dataset)", "dist.all_reduce(stats)")
    assert lines(tmp_path, files, "DDP034") == [("data.py", 9)]
    # It repeats no sample: the padded-evaluation rule has nothing to say about it.
    assert lines(tmp_path, files, "DDP018") == []


def test_unpadded_eval_sampler_reduced_once_after_the_loop_is_clean(tmp_path: Path) -> None:
    # The metric is reduced once after the loop: every rank makes the same one collective.
    files = _eval_files("self.total_size = len(self.dataset)", "pass")
    files["train.py"] = files["train.py"].replace(
        "        return correct / seen", "        t = torch.tensor([correct, seen], device=\"cuda\")\n"
        "        dist.all_reduce(t)\n        return (t[0] / t[1]).item()")
    assert "dist.all_reduce(t)" in files["train.py"]
    assert lines(tmp_path, files, "DDP034") == []


def test_subclass_keeping_the_padded_total_still_pads(tmp_path: Path) -> None:
    # The subclass only fixes the arguments: torch's padding applies, and is reduced.
    files = _eval_files("pass", "dist.all_reduce(stats)")
    files["sampler.py"] = files["sampler.py"].split("            if len(")[0]
    assert "num_samples" not in files["sampler.py"]
    assert lines(tmp_path, files, "DDP034") == []
    assert lines(tmp_path, files, "DDP018") == [("data.py", 9)]
