"""The same seed on every rank read from settings that every rank loads alike, written the ways
fine-tuning and graph trainers write them, through `ddpcheck lint --select DDP029`:

- `cfg.get("seed", 42)` of a YAML dict a project loader returns, handed through a helper that
  applies command-line overrides and returns the dict, into the training function;
- `seed_everything(cfg.seed)` of PyTorch Geometric, which seeds torch like the other library
  seeders;
- `config["seed"]` of a project configuration class whose constructor hands the reading of the
  files to a method of its own, and whose error messages speak of "ranking" and "the same time"
  (prose, not a rank or the clock).

A seed offset by the rank, a default that is not a number, or a class that mixes the rank into
its settings stays quiet."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP029") -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


OVERRIDES = """\
    import argparse
    import os
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    import yaml
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def read_yaml(path):
        with open(path) as f:
            return yaml.safe_load(f)


    def apply_overrides(cfg, pairs):
        for pair in pairs:
            key, value = pair.split("=", 1)
            cfg[key] = value
        return cfg


    def seed_all(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


    def train(cfg: dict):
        seed_all({seed})
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.1)).cuda()
        model = DDP(net, device_ids=[local_rank])
        loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        for x in loader:
            model(x.cuda()).sum().backward()


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--config", required=True)
        parser.add_argument("overrides", nargs="*")
        args = parser.parse_args()
        cfg = read_yaml(args.config)
        cfg = apply_overrides(cfg, args.overrides)
        train(cfg)


    if __name__ == "__main__":
        main()
"""


def test_a_seed_read_with_get_and_a_literal_default_is_the_same_on_every_rank(tmp_path: Path) -> None:
    code = OVERRIDES.replace("{seed}", 'cfg.get("seed", 42)')
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == [32]


def test_a_seed_read_with_get_and_offset_by_the_rank_is_quiet(tmp_path: Path) -> None:
    code = OVERRIDES.replace("{seed}", 'cfg.get("seed", 42) + int(os.environ["RANK"])')
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == []


def test_a_get_whose_default_is_drawn_is_not_known_to_be_the_same(tmp_path: Path) -> None:
    code = OVERRIDES.replace("{seed}", 'cfg.get("seed", random.randint(0, 9999))')
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == []


GRAPH = """\
    import os

    import hydra
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler
    from torch_geometric.loader import DataLoader
    from torch_geometric.seed import seed_everything


    @hydra.main(version_base=None, config_path="configs", config_name="train")
    def main(cfg):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        seed_everything({seed})
        net = GraphNet(cfg.hidden, dropout=cfg.dropout).cuda()
        model = DDP(net, device_ids=[local_rank])
        sampler = DistributedSampler(graphs, shuffle=True)
        loader = DataLoader(graphs, batch_size=cfg.batch_size, sampler=sampler)
        for batch in loader:
            model(batch.cuda()).mean().backward()


    class GraphNet(torch.nn.Module):
        def __init__(self, hidden, dropout):
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden)
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, batch):
            return self.drop(self.lin(batch.x))


    if __name__ == "__main__":
        main()
"""


def test_pyg_seed_everything_with_the_composed_seed_is_reported(tmp_path: Path) -> None:
    code = GRAPH.replace("{seed}", "cfg.seed")
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == [17]


def test_pyg_seed_everything_offset_by_the_rank_is_quiet(tmp_path: Path) -> None:
    code = GRAPH.replace("{seed}", "cfg.seed + dist.get_rank()")
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == []


SETTINGS = """\
    import yaml


    class Settings:
        def __init__(self, files=None):
            self.store = self._read_files(files)
            self._check()

        def _read_files(self, files):
            merged = {}
            for name in files or ():
                with open(name) as f:
                    merged.update(yaml.safe_load(f))
            return merged

        def _check(self):
            if self.store.get("metrics") and self.store.get("losses"):
                raise RuntimeError("ranking metrics and losses cannot be chosen at the same time")
            {extra}

        def __getitem__(self, key):
            return self.store.get(key)

        def __setitem__(self, key, value):
            self.store[key] = value
"""

RUN = """\
    import os
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from settings import Settings


    def seed_run(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


    def run(local_rank, files):
        config = Settings(files)
        config["device"] = torch.device("cuda", local_rank)
        seed_run(config["seed"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        net = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.Dropout(0.1)).cuda()
        model = DDP(net, device_ids=[local_rank])
        loader = DataLoader(items, batch_size=64, sampler=DistributedSampler(items))
        for x in loader:
            model(x.cuda()).sum().backward()


    if __name__ == "__main__":
        run(int(os.environ["LOCAL_RANK"]), ["configs/base.yaml"])
"""


def test_a_settings_class_reading_its_files_in_a_method_holds_the_same_seed(tmp_path: Path) -> None:
    files = {"run.py": RUN, "settings.py": SETTINGS.replace("{extra}", "")}
    assert _lines(lint_project(tmp_path, files, "run.py", select="DDP029")) == [22]


def test_a_settings_class_that_mixes_in_the_rank_is_quiet(tmp_path: Path) -> None:
    extra = 'self.store["seed"] = self.store.get("seed", 0) + int(os.environ.get("RANK", 0))'
    files = {"run.py": RUN, "settings.py": SETTINGS.replace("{extra}", extra).replace("import yaml", "import os\n    import yaml")}
    assert _lines(lint_project(tmp_path, files, "run.py", select="DDP029")) == []


RESEEDED = """\
    import argparse
    import os
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def set_seed(args):
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        set_seed(args)
        net = torch.nn.Sequential(torch.nn.Linear(32, 2), torch.nn.Dropout(0.3)).cuda()
        model = DDP(net, device_ids=[local_rank])
        loader = DataLoader(examples, batch_size=16, sampler=DistributedSampler(examples))
        for epoch in range(1, args.epochs + 1):
            kept = args.seed
            {write}
            set_seed(args)
            args.seed = kept
            for x in loader:
                model(x.cuda()).sum().backward()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=2233)
        parser.add_argument("--epochs", type=int, default=3)
        main(parser.parse_args())
"""


def test_a_seed_moved_by_the_epoch_on_every_rank_alike_is_still_the_same(tmp_path: Path) -> None:
    # `args.seed += epoch` (and restoring it) gives every rank the same seed again.
    code = RESEEDED.replace("{write}", "args.seed += epoch")
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == [22]


def test_a_seed_moved_by_the_rank_is_quiet(tmp_path: Path) -> None:
    code = RESEEDED.replace("{write}", "args.seed += epoch + dist.get_rank()")
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == []


def test_a_seed_moved_on_some_ranks_only_is_quiet(tmp_path: Path) -> None:
    code = RESEEDED.replace("{write}", "if local_rank > 0:\n                args.seed += 1")
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == []


def test_a_seed_moved_by_what_a_call_returns_is_quiet(tmp_path: Path) -> None:
    code = RESEEDED.replace("{write}", "args.seed = pick_seed(epoch)")
    assert _lines(lint_project(tmp_path, {"train.py": code}, "train.py", select="DDP029")) == []
