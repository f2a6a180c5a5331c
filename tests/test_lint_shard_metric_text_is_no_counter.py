"""Text added to in an evaluation loop over a rank's shard (`line += "."`, a mark per batch),
through `ddpcheck lint` (DDP036): a string counts no sample, so printing it reports no shard
figure; a loss summed beside it and printed still is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    @torch.no_grad()
    def evaluate(model, val_set):
        loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))
        line = ""
        total = 0.0
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).item()
            line += "."
        SHOWN
    """


def _lint(tmp_path: Path, shown: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"main.py": SCRIPT.replace("SHOWN", shown)})
    return finding_set(tmp_path, "main.py", select="DDP036")


def test_a_string_built_in_the_loop_is_no_shard_figure(tmp_path: Path) -> None:
    assert _lint(tmp_path, "print(line)") == set()


def test_the_loss_summed_beside_it_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, 'print(line, f"loss {total:.4f}")') == {("main.py", 14, "DDP036")}
