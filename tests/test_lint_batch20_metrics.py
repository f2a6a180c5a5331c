"""DDP035 and DDP036 on the ways batch 20's scripts leave their loops and report their metrics: a
debug exit in a run whose launch requires the debug flag off, an FID loader from a shared builder, a validation loss
taken from a dict of split loaders and a dict of per-term lists. Each through `ddpcheck lint` on a
small project written in the style of the scripts, with a variant that must stay as it is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], code: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each `code` finding when `target` is linted."""
    return [(Path(f["path"]).name, f["location"]["line"]) for f in lint_project(tmp_path, files, target, select=code)]


# A layout generator's trainer: the workers are spawned only when the debug flag is off, and the
# epoch's step loop leaves after one step under `if rank == 0:` ... `if cfg.debug: break`.
DEBUG_EXIT = """\
    import torch
    import torch.multiprocessing as mp
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def main(cfg):
        world_size = torch.cuda.device_count()
        if world_size > 1 and LAUNCH:
            cfg.use_ddp = True
            mp.spawn(main_worker, nprocs=world_size, args=(world_size, cfg))
        else:
            cfg.use_ddp = False
            main_worker(0, world_size, cfg)


    def main_worker(rank, world_size, cfg):
        if cfg.use_ddp:
            init_process_group("nccl", rank=rank, world_size=world_size)
        model = torch.nn.Linear(4, 2).to(rank)
        if cfg.use_ddp:
            model = DDP(model, device_ids=[rank])
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 4))
        sampler = DistributedSampler(dataset) if cfg.use_ddp else None
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(cfg.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            train(model, loader, optimizer, cfg, rank)
        if cfg.use_ddp:
            destroy_process_group()


    def train(model, loader, optimizer, cfg, rank):
        steps = 0
        for (x,) in loader:
            optimizer.zero_grad()
            loss = model(x.to(rank)).sum()
            loss.backward()
            optimizer.step()
            steps += 1
            if rank == 0:
                print(steps)
                if cfg.debug:
                    break


    if __name__ == "__main__":
        main(None)
"""


def test_debug_exit_of_a_launch_that_requires_debug_off_is_not_reported(tmp_path: Path) -> None:
    script = DEBUG_EXIT.replace("LAUNCH", "not cfg.debug")
    assert lines(tmp_path, {"train.py": script}, "DDP035") == []


def test_debug_exit_of_a_launch_that_ignores_the_flag_is_reported(tmp_path: Path) -> None:
    script = DEBUG_EXIT.replace("LAUNCH", "cfg.spawn")
    assert lines(tmp_path, {"train.py": script}, "DDP035") == [("train.py", 48)]


# A flow-matching trainer: one loader builder serves training and the FID's reference images
# (`is_for_fid=True`), and the evaluation's torchmetrics FID syncs its states over the ranks.
FID_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torchvision import datasets

    from training.eval_loop import eval_model


    def get_data_loader(args, is_for_fid):
        dataset = datasets.CIFAR10(root=args.data_path, train=True, download=True)
        sampler = torch.utils.data.DistributedSampler(
            dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True
        )
        return torch.utils.data.DataLoader(
            dataset, sampler=sampler, batch_size=args.batch_size, drop_last=not is_for_fid,
        )


    def main(args):
        dist.init_process_group("nccl")
        device = torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
        data_loader_train = get_data_loader(args, is_for_fid=False)
        LOADER = get_data_loader(args, is_for_fid=FLAG)
        model = DDP(torch.nn.Linear(4, 4).to(device), device_ids=[device.index])
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        for epoch in range(args.epochs):
            data_loader_train.sampler.set_epoch(epoch)
            for samples, _ in data_loader_train:
                optimizer.zero_grad()
                model(samples.to(device)).sum().backward()
                optimizer.step()
            stats = eval_model(model, LOADER, device)
            if dist.get_rank() == 0:
                print(stats["fid"])
        dist.destroy_process_group()
"""

FID_EVAL = """\
    import torch
    from torchmetrics.image.fid import FrechetInceptionDistance


    def eval_model(model, data_loader, device):
        fid_metric = FrechetInceptionDistance(normalize=True).to(device)
        with torch.no_grad():
            for samples, _ in data_loader:
                fid_metric.update(samples.to(device), real=True)
                fid_metric.update(model(samples.to(device)), real=False)
        return {"fid": float(fid_metric.compute())}
"""


def test_loader_built_with_the_fid_switch_on_is_an_evaluation_loader(tmp_path: Path) -> None:
    files = {"train.py": FID_SCRIPT.replace("LOADER", "loader").replace("FLAG", "True"),
             "training/__init__.py": "", "training/eval_loop.py": FID_EVAL}
    assert lines(tmp_path, files, "DDP018") == [("train.py", 11)]


def test_loader_named_for_the_fid_is_an_evaluation_loader(tmp_path: Path) -> None:
    files = {"train.py": FID_SCRIPT.replace("LOADER", "data_loader_fid").replace("FLAG", "args.real"),
             "training/__init__.py": "", "training/eval_loop.py": FID_EVAL}
    assert lines(tmp_path, files, "DDP018") == [("train.py", 11)]


def test_builder_used_for_training_alone_is_not_reported(tmp_path: Path) -> None:
    files = {"train.py": FID_SCRIPT.replace("LOADER", "loader").replace("FLAG", "False"),
             "training/__init__.py": "", "training/eval_loop.py": FID_EVAL}
    assert lines(tmp_path, files, "DDP018") == []


def test_confidence_is_no_fid(tmp_path: Path) -> None:
    script = FID_SCRIPT.replace("LOADER", "confidence_loader").replace("FLAG", "args.real")
    files = {"train.py": script.replace("is_for_fid", "is_for_confidence"),
             "training/__init__.py": "", "training/eval_loop.py": FID_EVAL}
    assert lines(tmp_path, files, "DDP018") == []


# A layout generator: one loader per split kept in a dict filled in a loop, an evaluation that
# appends each loss term to a `defaultdict(list)` and returns the means, and the epoch loop that
# takes the total from the returned dict and logs it on rank 0.
SPLIT_LOSSES = """\
    from collections import defaultdict

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def main_worker(rank, world_size, cfg):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        dataset = {"train": torch.randn(64, 4), "val": torch.randn(16, 4)}
        loaders = {}
        for split in ["train", "val"]:
            sampler = DistributedSampler(dataset[split], num_replicas=world_size, rank=rank)
            loaders[split] = DataLoader(dataset[split], batch_size=8, sampler=sampler)
        model = DDP(torch.nn.Linear(4, 2).to(rank), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(cfg.epochs):
            loaders["train"].sampler.set_epoch(epoch)
            for x in loaders["train"]:
                optimizer.zero_grad()
                model(x.to(rank)).sum().backward()
                optimizer.step()
            val_loss_dict = evaluate(model, loaders["val"], rank)
            val_loss = val_loss_dict["total"]
            REDUCE
            if rank == 0:
                print("epoch %d: val_loss = %.4f" % (epoch, val_loss))
        dist.destroy_process_group()


    @torch.no_grad()
    def evaluate(model, data_loader, rank):
        log_losses = defaultdict(list)
        for x in data_loader:
            out = model(x.to(rank))
            losses = {"l1": out.abs().mean(), "l2": out.pow(2).mean()}
            for k, v in losses.items():
                log_losses[k].append(v.cpu().item())
        for k, v in log_losses.items():
            log_losses[k] = sum(v) / len(v)
        log_losses["total"] = sum(log_losses.values())
        return log_losses
"""


def test_loss_of_a_split_loader_from_a_dict_is_reported_where_rank_zero_logs_it(tmp_path: Path) -> None:
    script = SPLIT_LOSSES.replace("REDUCE", "pass")
    assert lines(tmp_path, {"train.py": script}, "DDP036") == [("train.py", 29)]


def test_loss_all_reduced_before_the_log_is_not_reported(tmp_path: Path) -> None:
    script = SPLIT_LOSSES.replace("REDUCE", "t = torch.tensor([val_loss], device=rank)\n"
                                  "            dist.all_reduce(t)\n            val_loss = t.item() / world_size")
    assert lines(tmp_path, {"train.py": script}, "DDP036") == []
