"""Ways one rank leaves or skips the training loop alone, through `ddpcheck lint` (DDP035): a
script whose loop sits at module level, a base trainer's epoch loop whose step a subclass defines,
an early-stopping answer a method keeps on rank 0, a clean exit in an error handler, and a
project helper whose only collective is a barrier. Each test writes a small project in the style
of real training code and reads what the user sees."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli


def _findings(root: Path, files: dict[str, str], select: str = "DDP035") -> set[tuple[str, int]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    first = next(iter(files))
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", select, "--output-format", "json",
                str(root / first), cwd=root)
    assert r.returncode == 0, r.stderr
    return {(Path(f["path"]).name, f["location"]["line"]) for f in json.loads(r.stdout)["findings"]}


# A training script whose loop runs at module level, with a helper object that saves on rank 0 and
# waits at a barrier when it reloads: the barrier carries no decision.
MODULE_LEVEL = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)


    class Keeper:
        def __init__(self, model):
            self.model = model
            self.bad = 0

        def update(self, step, loss):
            if torch.isnan(loss):
                self.bad += 1
                if self.bad > 5:
                    dist.barrier()
                    self.model.load_state_dict(torch.load("last.pt", map_location="cpu"))


    model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
    keeper = Keeper(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1000):
        try:
            x = torch.randn(16, 8, device="cuda")
            loss = model(x).pow(2).mean()
            if torch.isnan(loss):
                keeper.update(step, loss)
                continue
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        except Exception as e:
            print(f"step {step} failed: {e}")
            continue
    dist.destroy_process_group()
    """


def test_module_level_loop_skips_reported(tmp_path: Path) -> None:
    found = _findings(tmp_path, {"train.py": MODULE_LEVEL})
    assert ("train.py", 34) in found  # the NaN skip: the barrier in keeper.update agrees on nothing
    assert ("train.py", 40) in found  # the broad handler around the step


def test_module_level_skip_with_reduced_flag_clean(tmp_path: Path) -> None:
    agreed = MODULE_LEVEL.replace(
        "            if torch.isnan(loss):\n                keeper.update(step, loss)\n",
        "            bad = torch.isnan(loss).float()\n            dist.all_reduce(bad)\n"
        "            if bad.item() > 0:\n                keeper.update(step, loss)\n")
    agreed = agreed.replace("        except Exception as e:\n            print(f\"step {step} failed: {e}\")\n"
                            "            continue\n", "        finally:\n            pass\n")
    found = _findings(tmp_path, {"train.py": agreed})
    assert not found


BASE_TRAINER = """\
    import torch


    class BaseTrainer:
        def __init__(self, model, rank, epochs, patience):
            self.model = model
            self.rank = rank
            self.epochs = epochs
            self.patience = patience
            self.best = float("inf")

        def _train_epoch(self, epoch):
            raise NotImplementedError

        def train(self):
            stale = 0
            for epoch in range(self.epochs):
                val_loss = self._train_epoch(epoch)
                if self.rank == 0:
                    if val_loss < self.best:
                        self.best = val_loss
                        stale = 0
                    else:
                        stale += 1
                    if stale > self.patience:
                        break
    """

SEG_TRAINER = """\
    import torch

    from base.base_trainer import BaseTrainer


    class SegTrainer(BaseTrainer):
        def __init__(self, model, loader, optimizer, rank, epochs, patience):
            super().__init__(model, rank, epochs, patience)
            self.loader = loader
            self.optimizer = optimizer

        def _train_epoch(self, epoch):
            total = 0.0
            for images, masks in self.loader:
                loss = torch.nn.functional.cross_entropy(self.model(images), masks)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                total += loss.item()
            return total / len(self.loader)
    """

SEG_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainer.seg_trainer import SegTrainer


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        model = DDP(build_model().cuda())
        trainer = SegTrainer(model, make_loader(), torch.optim.SGD(model.parameters(), lr=0.01),
                             rank, epochs=50, patience=5)
        trainer.train()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_base_trainer_loop_reached_from_script(tmp_path: Path) -> None:
    found = _findings(tmp_path, {"train_seg.py": SEG_SCRIPT, "base/__init__.py": "",
                                 "base/base_trainer.py": BASE_TRAINER, "trainer/__init__.py": "",
                                 "trainer/seg_trainer.py": SEG_TRAINER})
    assert found == {("base_trainer.py", 26)}


def test_base_trainer_stop_on_every_rank_clean(tmp_path: Path) -> None:
    every_rank = BASE_TRAINER.replace("                if self.rank == 0:\n", "                if True:\n")
    # (The epoch's loss all-reduced: a sum of the rank's own `loss.item()` returned as it is
    # would differ from rank to rank, and so would the decision.)
    reduced = SEG_TRAINER.replace("import torch\n", "import torch\n    import torch.distributed as dist\n", 1).replace(
        "            return total / len(self.loader)",
        "            t = torch.tensor(total)\n            dist.all_reduce(t)\n"
        "            return t.item() / dist.get_world_size() / len(self.loader)")
    found = _findings(tmp_path, {"train_seg.py": SEG_SCRIPT, "base/__init__.py": "",
                                 "base/base_trainer.py": every_rank, "trainer/__init__.py": "",
                                 "trainer/seg_trainer.py": reduced})
    assert not found
    # The same loss unreduced: each rank stops on its own figure.
    found = _findings(tmp_path / "own", {"train_seg.py": SEG_SCRIPT, "base/__init__.py": "",
                                         "base/base_trainer.py": every_rank, "trainer/__init__.py": "",
                                         "trainer/seg_trainer.py": SEG_TRAINER})
    assert found == {("base_trainer.py", 26)}


EARLY_STOP_METHOD = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Runner:
        def __init__(self, model, optimizer, rank, patience):
            self.model = model
            self.optimizer = optimizer
            self.rank = rank
            self.patience = patience
            self.best = 0.0
            self.val_acc = 0.0
            self.stale = 0

        def fit_epoch(self, loader):
            for x, y in loader:
                self.optimizer.zero_grad()
                torch.nn.functional.cross_entropy(self.model(x), y).backward()
                self.optimizer.step()

        def save_models(self, out_dir):
            if self.rank == 0:
                if self.val_acc > self.best:
                    self.best = self.val_acc
                    torch.save(self.model.state_dict(), f"{out_dir}/best.pt")
                    self.stale = 0
                self.stale += 1
            return self.stale >= self.patience


    def main(loader, out_dir):
        dist.init_process_group("nccl")
        model = DDP(build().cuda())
        runner = Runner(model, torch.optim.Adam(model.parameters()), dist.get_rank(), patience=10)
        for epoch in range(100):
            runner.fit_epoch(loader)
            stop = runner.save_models(out_dir)
            if stop:
                break
        dist.destroy_process_group()
    """


def test_early_stop_answer_kept_by_rank0_in_a_method(tmp_path: Path) -> None:
    assert _findings(tmp_path, {"train.py": EARLY_STOP_METHOD}) == {("train.py", 40)}


def test_early_stop_answer_kept_on_every_rank_clean(tmp_path: Path) -> None:
    shared = EARLY_STOP_METHOD.replace("            if self.rank == 0:\n", "            if self.val_acc >= 0:\n")
    assert not _findings(tmp_path, {"train.py": shared})


CLEAN_EXIT = """\
    import sys

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, loader, optimizer, rank):
            self.model = DDP(model.cuda(rank), device_ids=[rank])
            self.loader = loader
            self.optimizer = optimizer

        def train_epoch(self):
            for x, y in self.loader:
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                try:
                    loss.backward()
                except RuntimeError as e:
                    print(e)
                    quit()
                self.optimizer.step()
    """


def test_clean_exit_in_error_handler_reported(tmp_path: Path) -> None:
    assert _findings(tmp_path, {"trainer.py": CLEAN_EXIT}) == {("trainer.py", 21)}


def test_clean_exit_variants(tmp_path: Path) -> None:
    zero = CLEAN_EXIT.replace("quit()", "sys.exit(0)")
    assert _findings(tmp_path / "a", {"trainer.py": zero}) == {("trainer.py", 21)}
    # A failing status makes torchrun stop every rank; a re-raise does too.
    failing = CLEAN_EXIT.replace("quit()", "sys.exit(1)")
    assert not _findings(tmp_path / "b", {"trainer.py": failing})
    raised = CLEAN_EXIT.replace("quit()", "raise")
    assert not _findings(tmp_path / "c", {"trainer.py": raised})
    # Outside any training loop (a one-off set-up step), nothing else waits on this rank's loop.
    setup = CLEAN_EXIT.replace("                loss.backward()\n", "                pass\n")
    assert not _findings(tmp_path / "d", {"trainer.py": setup})
