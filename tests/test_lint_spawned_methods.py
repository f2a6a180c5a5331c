"""A trainer class that starts its own workers with `mp.spawn(self._train, ...)`, the class living
in a module the script imports: the bound method runs in every spawned process, so what it
reaches (a base class's setup that makes the process group) is part of the run, through
`ddpcheck lint`. The process index lands on the parameter after `self`. Each with the variants
that stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

SCRIPT = """\
    import argparse

    from trainers.segment import SegmentTrainer


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--config", default="configs/base.json")
        args = parser.parse_args()
        trainer = SegmentTrainer(args.config)
        trainer.fit()
"""

BASE = """\
    import torch
    import torch.distributed as dist


    class BaseTrainer:
        def __init__(self, config):
            self.config = config

        def setup(self, gpu, world_size):
            torch.cuda.set_device(gpu)
            dist.init_process_group("nccl", init_method="file:///tmp/rendezvous", rank=gpu,
                                    world_size=world_size)

        def teardown(self):
            dist.destroy_process_group()
"""

TRAINER = """\
    import torch
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainers.base import BaseTrainer


    class SegmentTrainer(BaseTrainer):
        def _worker(self, gpu, world_size):
            self.setup(gpu, world_size)
            model = DDP(torch.nn.Linear(8, 2).cuda(gpu), device_ids=[gpu])
            for epoch in range(10):
                model(torch.randn(4, 8, device=gpu)).sum().backward()
{ending}
        def fit(self):
            world_size = torch.cuda.device_count()
            mp.spawn(self._worker, args=(world_size,), nprocs=world_size)
"""


def _project(ending: str) -> dict[str, str]:
    return {
        "train.py": SCRIPT,
        "trainers/__init__.py": "",
        "trainers/base.py": BASE,
        "trainers/segment.py": TRAINER.format(ending=ending),
    }


def _codes(findings: list[dict], code: str) -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


def test_a_group_made_in_a_spawned_method_of_an_imported_trainer_is_never_destroyed(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, _project(""), "train.py", select="DDP005")
    assert _codes(findings, "DDP005") == [("base.py", 11)]


def test_a_spawned_method_that_tears_the_group_down_is_clean(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, _project("            self.teardown()\n"), "train.py", select="DDP005")
    assert _codes(findings, "DDP005") == []


def test_the_process_index_of_a_spawned_method_is_the_local_gpu(tmp_path: Path) -> None:
    # `gpu` is the spawn index (the parameter after `self`), not the `args=` tuple's world size:
    # a device chosen from it is the local GPU, not the global rank.
    findings = lint_project(tmp_path, _project("            self.teardown()\n"), "train.py", select="DDP007,DDP033")
    assert findings == []


def test_a_spawned_method_the_script_never_starts_is_not_followed(tmp_path: Path) -> None:
    files = _project("")
    files["train.py"] = SCRIPT.replace("        trainer.fit()\n", "        print(trainer.config)\n")
    findings = lint_project(tmp_path, files, "train.py", select="DDP005")
    assert findings == []
