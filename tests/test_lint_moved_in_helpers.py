"""A wrapped model handed to a helper that moves it, through `ddpcheck lint` (DDP014): a trainer
that snapshots its weights for a top-k logger by moving the module to the CPU and back."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

TRAINER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, device):
            self.device = device
            self.model = model
            dist.init_process_group("nccl")
            self.model = DDP(self.model.to(self.device), device_ids=[int(os.environ["LOCAL_RANK"])])

        def _snapshot(self, model, epoch):
            state = {"epoch": epoch, "weights": MOVE.state_dict()}
            model.to(self.device)
            return state

        def fit(self, loader, optimizer, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    torch.nn.functional.mse_loss(self.model(x), y).backward()
                    optimizer.step()
                self.best = self._snapshot(HANDED, epoch)
            dist.destroy_process_group()
    """


def _lint(tmp_path: Path, move: str, handed: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"trainer.py": TRAINER.replace("MOVE", move).replace("HANDED", handed)})
    return finding_set(tmp_path, "trainer.py", select="DDP014")


def test_the_wrapped_module_moved_to_the_cpu_in_a_helper_is_reported_once(tmp_path: Path) -> None:
    assert _lint(tmp_path, "model.cpu()", "self.model.module") == {("trainer.py", 16, "DDP014")}


def test_the_wrapper_itself_handed_and_moved_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, "model.cpu()", "self.model") == {("trainer.py", 16, "DDP014")}


def test_a_copy_of_the_state_made_on_the_cpu_is_clean(tmp_path: Path) -> None:
    # The fix: read the weights without moving the module.
    assert _lint(tmp_path, "model", "self.model.module") == set()
