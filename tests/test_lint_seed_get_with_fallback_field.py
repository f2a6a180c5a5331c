"""The same seed on every rank (DDP029) read from a section of the settings under one of two
names, `opts["train"].get("seed", opts["train"].get("random_seed", 7))`: the second read, with
a literal default of its own, is the same everywhere like the first. The settings are the
parsed command line turned into a dict and filled from a YAML file by a project helper.
Through `ddpcheck lint`, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


HELPERS = """\
    import random

    import numpy as np
    import torch
    import yaml


    def merge_file(opts):
        with open(opts["settings"]) as f:
            loaded = yaml.safe_load(f)
        for key, value in loaded.items():
            opts[key] = value
        return opts


    def fix_seeds(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
"""

SCRIPT = """\
    import argparse
    import os
    import random
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    from tools import fix_seeds, merge_file

    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", default="configs/base.yaml")


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        opts = merge_file(vars(parser.parse_args()))
        opts["train"]["rank"] = dist.get_rank()
        seed = {seed}
        fix_seeds(seed)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.2)).cuda(local_rank)
        model = DistributedDataParallel(net, device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data))
        for x in loader:
            noise = torch.randn_like(x)
            loss = model(x.cuda(local_rank) + noise.cuda(local_rank)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        main()
"""


def _lint(tmp_path: Path, seed: str) -> list[tuple[str, int]]:
    return lines(tmp_path, {"tools.py": HELPERS, "train.py": SCRIPT.format(seed=seed)}, "DDP029")


def test_seed_under_either_of_two_names_with_a_literal_fallback_is_reported(tmp_path: Path) -> None:
    seed = 'opts["train"].get("seed", opts["train"].get("random_seed", 7))'
    assert _lint(tmp_path, seed) == [("train.py", 20)]


def test_fallback_field_offset_by_the_rank_is_clean(tmp_path: Path) -> None:
    seed = 'opts["train"].get("seed", opts["train"].get("random_seed", 7)) + dist.get_rank()'
    assert _lint(tmp_path, seed) == []


def test_fallback_field_with_a_drawn_default_is_clean(tmp_path: Path) -> None:
    # Without either field every rank draws its own seed.
    seed = 'opts["train"].get("seed", opts["train"].get("random_seed", random.randint(0, 999)))'
    assert _lint(tmp_path, seed) == []


def test_fallback_read_of_another_object_is_clean(tmp_path: Path) -> None:
    # The default reads something else than the settings (what each rank holds is not known).
    seed = 'opts["train"].get("seed", os.environ.get("SEED_OFFSET", 7))'
    assert _lint(tmp_path, seed) == []
