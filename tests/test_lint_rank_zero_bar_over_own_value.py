"""DDP009's loop count set on rank 0: a progress bar that rank 0 wraps around the name's own value
(`batches = enumerate(loader)`, then `if is_main: batches = tqdm(batches)`) yields the same items
as on every other rank, so the collective in the loop runs equally often. Through `ddpcheck lint`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

SCRIPT = """\
    import torch
    import torch.distributed as dist
    from tqdm import tqdm


    def is_main_process():
        return dist.get_rank() == 0


    def evaluate(model, loader, epoch):
        model.eval()
        total = torch.zeros(1)
        {first}
        if is_main_process():
            batches = tqdm({wrapped}, total=len(loader), desc=f"eval {epoch}")
        with torch.no_grad():
            for i, (x, y) in batches:
                loss = (model(x) - y).pow(2).mean()
                dist.all_reduce(loss)
                total += loss
        return total
"""


def _lines(tmp_path: Path, first: str, wrapped: str) -> list[int]:
    source = SCRIPT.replace("{first}", first).replace("{wrapped}", wrapped)
    return [f["location"]["line"] for f in lint_project(tmp_path, {"evaluate.py": source}, "evaluate.py",
                                                        select="DDP009")]


def test_bar_around_the_names_own_value_keeps_the_count(tmp_path: Path) -> None:
    assert _lines(tmp_path, "batches = enumerate(loader)", "batches") == []
    # An empty list every rank holds, wrapped on rank 0: no items anywhere.
    assert _lines(tmp_path, "batches = []", "batches") == []


def test_bar_over_other_items_on_rank_zero_is_still_reported(tmp_path: Path) -> None:
    # Rank 0 iterates the loader, the others an empty list.
    assert _lines(tmp_path, "batches = []", "enumerate(loader)") == [17]
