"""DDP034 on strided loops: `for i in range(rank, n, world_size):` around a collective gives the
first `n % world_size` ranks one more collective, also in an evaluation script that does not
back-propagate itself, and a path joined through `import os.path as osp` (`osp.join(...)`) is
not DDP's `join()`, which would even the inputs out. Through `ddpcheck lint` on small scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

EVALUATE = """\
    import os.path as osp

    import torch
    import torch.distributed as dist


    def rank_and_world():
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1


    def score_sequences(net, sequences, out_dir):
        rank, world_size = rank_and_world()
        total = torch.zeros(1, device="cuda")
        for i in {indices}:
            frames = sequences[i]
            restored = net(frames.cuda())
            err = (restored - frames.cuda()).abs().mean().reshape(1)
            dist.all_reduce(err)
            total += err
            torch.save(restored.cpu(), osp.join(out_dir, f"seq_{i}.pt"))
        return total
"""


def _lines(tmp_path: Path, indices: str) -> list[int]:
    files = {"evaluate.py": EVALUATE.replace("{indices}", indices)}
    return [f["location"]["line"] for f in lint_project(tmp_path, files, "evaluate.py", select="DDP034")]


def test_strided_loop_around_a_collective_is_uneven_without_a_backward_in_the_file(tmp_path: Path) -> None:
    assert _lines(tmp_path, "range(rank, len(sequences), world_size)") == [16]


def test_strided_loop_over_a_count_every_rank_shares_is_even(tmp_path: Path) -> None:
    # Cut to a multiple of the world size first: every rank runs the same number of collectives.
    assert _lines(tmp_path, "range(rank, len(sequences) // world_size * world_size, world_size)") == []


def test_ddp_join_still_evens_the_loop_out(tmp_path: Path) -> None:
    files = {"evaluate.py": EVALUATE.replace("{indices}", "range(rank, len(sequences), world_size)").replace(
        "        for i in range(", "        with net.join():\n          for i in range(")}
    # (a two-space indent under the `with`: the loop's body keeps its own, deeper, indent)
    assert "with net.join():" in files["evaluate.py"]
    assert [f["location"]["line"] for f in lint_project(tmp_path, files, "evaluate.py", select="DDP034")] == []
