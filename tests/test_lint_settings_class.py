"""An attribute of an instance of a plain settings class in the script (`class TrainConfig: lr =
5e-5`, `cfg = TrainConfig()`, `AdamW(..., lr=cfg.lr)`), through `ddpcheck lint`: the value is the
class body's literal, so the fixed learning rate is reported like `lr=5e-5` would be. A dataclass
that a command-line binder fills, a class with a settings library's base, and a script that sets
the attributes by name from a file stay unknown."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


SETTINGS_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim import AdamW


    class TrainConfig:
        batch_size = 72
        lr = 5e-5
        weight_decay = 0.1
        num_epochs = 100


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        cfg = TrainConfig()
        model = DDP(torch.nn.Linear(8, 8).to(local_rank), device_ids=[local_rank])
        optimizer = AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        for epoch in range(cfg.num_epochs):
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_rate_from_a_plain_settings_class_is_a_constant(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train_ddp.py": SETTINGS_TRAIN}, "train_ddp.py", select="DDP004")
    assert _lines(findings, "DDP004") == [22]
    # Inherited from a project base class.
    based = SETTINGS_TRAIN.replace("class TrainConfig:\n        batch_size = 72\n        lr = 5e-5\n",
                                   "class BaseConfig:\n        lr = 5e-5\n\n\n    class TrainConfig(BaseConfig):\n"
                                   "        batch_size = 72\n")
    findings = lint_project(tmp_path, {"train_ddp.py": based}, "train_ddp.py", select="DDP004")
    assert _lines(findings, "DDP004") == [25]


def test_settings_that_something_else_may_fill_stay_unknown(tmp_path: Path) -> None:
    # A dataclass a command-line binder fills (its defaults are only where the binder starts).
    dataclass = SETTINGS_TRAIN.replace("import os\n", "import os\n    from dataclasses import dataclass\n"
                                       "    from transformers import HfArgumentParser\n").replace(
        "class TrainConfig:\n        batch_size = 72\n        lr = 5e-5\n        weight_decay = 0.1\n",
        "@dataclass\n    class TrainConfig:\n        batch_size: int = 72\n        lr: float = 5e-5\n"
        "        weight_decay: float = 0.1\n").replace(
        "        cfg = TrainConfig()\n", "        (cfg,) = HfArgumentParser(TrainConfig).parse_args_into_dataclasses()\n")
    library = SETTINGS_TRAIN.replace("import os\n", "import os\n    from pydantic_settings import BaseSettings\n").replace(
        "class TrainConfig:", "class TrainConfig(BaseSettings):")
    by_name = SETTINGS_TRAIN.replace("        cfg = TrainConfig()\n",
                                     "        cfg = TrainConfig()\n"
                                     "        for key, value in torch.load(\"overrides.pt\").items():\n"
                                     "            setattr(cfg, key, value)\n")
    for source in (dataclass, library, by_name):
        findings = lint_project(tmp_path, {"train_ddp.py": source}, "train_ddp.py", select="DDP004")
        assert _lines(findings, "DDP004") == []
