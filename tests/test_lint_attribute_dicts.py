"""Settings kept in attribute dicts (`cfg = EasyDict({...})`, `SimpleNamespace(lr=...)`) and rates
computed from them (`cfg.emb_size ** -0.5`, the Noam rate), through `ddpcheck lint --select
DDP004`: the entries the script writes are literals, so the fixed rate is reported; an entry read
from the command line stays the user's choice."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


NOAM = """\
    import easydict
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn


    def main_worker(rank, world_size, config):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = nn.parallel.DistributedDataParallel(nn.Linear(config.emb_size, 8).to(rank), device_ids=[rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.emb_size ** -0.5, betas=(0.9, 0.98))
        for step in range(10):
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        config = {"emb_size": 768, "n_heads": 8}
        config = easydict.EasyDict(config)
        mp.spawn(main_worker, args=(torch.cuda.device_count(), config), nprocs=torch.cuda.device_count())
"""


def test_a_rate_computed_from_an_attribute_dict_of_literals_is_reported(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, {"train.py": NOAM}, "train.py", select="DDP004"), "DDP004") == [12]
    namespace = NOAM.replace("import easydict\n", "from types import SimpleNamespace\n").replace(
        '        config = {"emb_size": 768, "n_heads": 8}\n        config = easydict.EasyDict(config)\n',
        "        config = SimpleNamespace(emb_size=768, n_heads=8)\n")
    assert _lines(lint_project(tmp_path, {"train.py": namespace}, "train.py", select="DDP004"), "DDP004") == [12]


def test_an_entry_from_the_command_line_is_the_users_choice(tmp_path: Path) -> None:
    given = NOAM.replace("import easydict\n", "import argparse\n\n    import easydict\n").replace(
        '        config = {"emb_size": 768, "n_heads": 8}\n',
        "        parser = argparse.ArgumentParser()\n"
        "        parser.add_argument(\"--emb_size\", type=int, default=768)\n"
        "        config = {\"emb_size\": parser.parse_args().emb_size, \"n_heads\": 8}\n")
    assert _lines(lint_project(tmp_path, {"train.py": given}, "train.py", select="DDP004"), "DDP004") == []
