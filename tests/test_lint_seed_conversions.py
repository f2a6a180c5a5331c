"""The same seed on every rank written the ways recommendation and chemistry trainers write it,
through `ddpcheck lint --select DDP029`: a project seeding helper handed `int(args.seed)`, and
RecBole's `init_seed(seed, reproducibility)`; a seed offset by the rank stays clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


CONVERTED = """\
    import argparse
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def seed_everything(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


    def worker(rank, world_size, args):
        seed_everything(int(args.seed))
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1))
        model = DDP(net)
        for step in range(10):
            model(torch.randn(4, 8)).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", default="42")
        mp.spawn(worker, args=(2, parser.parse_args()), nprocs=2)
"""


def test_a_converted_command_line_seed_is_the_same_on_every_rank(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, {"train.py": CONVERTED}, "train.py", select="DDP029"), "DDP029") == [18]
    offset = CONVERTED.replace("seed_everything(int(args.seed))", "seed_everything(int(args.seed) + rank)")
    assert _lines(lint_project(tmp_path, {"train.py": offset}, "train.py", select="DDP029"), "DDP029") == []


def test_recboles_init_seed_seeds_torch(tmp_path: Path) -> None:
    recbole = CONVERTED.replace("    def seed_everything(seed):\n        random.seed(seed)\n"
                                "        np.random.seed(seed)\n        torch.manual_seed(seed)\n\n\n", "").replace(
        "import torch\n", "import torch\n    from recbole.utils import init_seed\n").replace(
        "seed_everything(int(args.seed))", "init_seed(42, True)")
    assert _lines(lint_project(tmp_path, {"train.py": recbole}, "train.py", select="DDP029"), "DDP029") == [13]


REPEATED = """\
    import argparse
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import yaml
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def finetune_ddp(rank, world_size, args):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
        with open(args.config) as f:
            config = yaml.safe_load(f)
        train_config = config["train_params"]
        for ix in np.arange(args.n_repeat):
            seed = SEED
            torch.manual_seed(seed)
            model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.2)).cuda(rank), device_ids=[rank])
            loader = DataLoader(args.data, sampler=DistributedSampler(args.data, seed=seed), num_workers=4)
            for x in loader:
                model(x.cuda(rank)).sum().backward()
        dist.destroy_process_group()


    def finetune(args):
        n_gpus = torch.cuda.device_count()
        if n_gpus >= 2:
            mp.spawn(finetune_ddp, args=(n_gpus, args), nprocs=n_gpus)
        else:
            for ix in np.arange(args.n_repeat):
                torch.manual_seed(int((ix + 1) * 42))
                train_single(args)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--config", default="config.yaml")
        parser.add_argument("--n_repeat", type=int, default=3)
        finetune(parser.parse_args())
    """


def _repeated(tmp_path: Path, seed: str) -> list[int]:
    return _lines(lint_project(tmp_path, {"finetune.py": REPEATED.replace("SEED", seed)}, "finetune.py",
                               select="DDP029"), "DDP029")


def test_a_seed_computed_from_a_repeat_counter_is_the_same_on_every_rank(tmp_path: Path) -> None:
    # Line 34, the single-process branch (`n_gpus >= 2` fails), is no rank's.
    assert _repeated(tmp_path, "int((ix + 1) * 42)") == [20]


def test_a_seed_from_a_section_of_a_yaml_configuration_is_the_same_on_every_rank(tmp_path: Path) -> None:
    assert _repeated(tmp_path, 'train_config["global_seed"]') == [20]


def test_a_repeat_seed_offset_by_the_rank_is_clean(tmp_path: Path) -> None:
    assert _repeated(tmp_path, "int((ix + 1) * 42) + rank") == []
