"""Learning rates (DDP004) held by settings written in code, through `ddpcheck lint`:

- a dataclass the script makes itself with every field left to its default (`cfg =
  TrainConfig()`) and hands to nothing that binds it: its defaults are what the run gets, so
  two rates passed through one project optimizer builder are reported where each is written;
  the same dataclass filled by a command-line binder, given its fields by keyword (`**`), or
  with the field written after it is made stays unknown;
- a defaults dict that a project function overwrites with the caller's entries under keys known
  only at run time (`for k in given: defaults[k] = given[k]`) and returns: its literal rate may
  be the command line's, so it is not reported; without the merge it is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP004") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


TRAIN = """\
    import os
    from dataclasses import dataclass

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from optim_utils import make_optimizer


    @dataclass
    class RunSettings:
        batch_size: int = 8
        gen_lr: float = 2e-4
        disc_lr: float = 1e-4
        out_dir: str = "./ckpt"


    def prepare(settings: RunSettings):
        os.makedirs(settings.out_dir, exist_ok=True)


    def worker(rank, world_size):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29511", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        settings = {make}
        prepare(settings)
        gen = DDP(build_gen().to(rank), device_ids=[rank])
        disc = DDP(build_disc().to(rank), device_ids=[rank])
        loader = DataLoader(clips, batch_size=settings.batch_size, sampler=DistributedSampler(clips))
        opt_g = make_optimizer(gen, lr=settings.gen_lr)
        opt_d = make_optimizer(disc, lr=settings.disc_lr)
        for x in loader:
            gen(x.to(rank)).mean().backward()
            opt_g.step()
            disc(x.to(rank)).mean().backward()
            opt_d.step()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n,), nprocs=n)
"""

OPTIM = """\
    import torch


    def make_optimizer(net, lr=1e-3, wd=0.01):
        decay = [p for p in net.parameters() if p.ndim >= 2]
        rest = [p for p in net.parameters() if p.ndim < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": rest}], lr, betas=(0.8, 0.99))
"""


def test_defaults_of_a_dataclass_nothing_binds_are_reported_where_written(tmp_path: Path) -> None:
    files = {"train.py": TRAIN.replace("{make}", "RunSettings()"), "optim_utils.py": OPTIM}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP004")) == [("train.py", 16), ("train.py", 17)]


def test_a_dataclass_filled_by_a_binder_stays_unknown(tmp_path: Path) -> None:
    train = TRAIN.replace("{make}", "tyro.cli(RunSettings)").replace("import torch\n", "import torch\n    import tyro\n", 1)
    files = {"train.py": train, "optim_utils.py": OPTIM}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP004")) == []


def test_a_dataclass_given_its_fields_by_keyword_stays_unknown(tmp_path: Path) -> None:
    files = {"train.py": TRAIN.replace("{make}", "RunSettings(**overrides)"), "optim_utils.py": OPTIM}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP004")) == []


def test_a_dataclass_field_written_after_it_is_made_stays_unknown(tmp_path: Path) -> None:
    train = TRAIN.replace("{make}", "RunSettings()").replace(
        "        os.makedirs(settings.out_dir, exist_ok=True)\n",
        "        os.makedirs(settings.out_dir, exist_ok=True)\n"
        "        settings.gen_lr = float(os.environ.get(\"GEN_LR\", settings.gen_lr))\n"
        "        settings.disc_lr = float(os.environ.get(\"DISC_LR\", settings.disc_lr))\n")
    files = {"train.py": train, "optim_utils.py": OPTIM}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP004")) == []


MERGED = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def settings(given=None):
        defaults = {
            "epochs": 2,
            "batch_size": 128,
            "learning_rate": 0.1,
            "momentum": 0.9,
        }
        {merge}
        return defaults


    def train(rank, world_size, given):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29512", rank=rank, world_size=world_size)
        given["rank"] = rank
        cfg = settings(given)
        net = DDP(build_net().to(rank), device_ids=[rank])
        opt = torch.optim.SGD(net.parameters(), lr=cfg["learning_rate"], momentum=cfg["momentum"])
        for epoch in range(cfg["epochs"]):
            for x, y in loaders[rank]:
                opt.zero_grad()
                net(x.to(rank), y.to(rank)).backward()
                opt.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--learning-rate", type=float, default=0.1)
        args = parser.parse_args()
        n = torch.cuda.device_count()
        mp.spawn(train, args=(n, {"learning_rate": args.learning_rate}), nprocs=n)
"""


def test_defaults_overwritten_by_the_callers_entries_are_not_known(tmp_path: Path) -> None:
    merge = "if given:\n            for key in given:\n                defaults[key] = given[key]"
    files = {"train.py": MERGED.replace("{merge}", merge)}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP004")) == []


def test_defaults_nothing_overwrites_are_reported(tmp_path: Path) -> None:
    files = {"train.py": MERGED.replace("{merge}", "pass")}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP004")) == [("train.py", 25)]
