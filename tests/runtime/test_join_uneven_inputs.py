"""Uneven inputs handled by DDP's Join(): inside the context the ranks with more batches take steps
that the others only shadow, so from then on the same step count means different points of
training. A correct script must get no finding, and a real gradient fault after the context must
still be found, at the step the ranks took together. Real 2-rank gloo jobs through the entry point."""

from __future__ import annotations

import pytest
from diag_jobs import assert_no_survivors, codes, ddpcheck_run, finding, fixture

pytestmark = pytest.mark.slow


def _check(data: dict, code: str) -> dict:
    return next(c for c in data["run"]["checks"] if c["code"] == code)


def test_steps_are_compared_where_the_ranks_take_them_together_after_join(tmp_path):
    script = fixture("join_uneven.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script)], tmp_path)
    assert data is not None, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == []
    for code in ("DDP105", "DDP106"):
        row = _check(data, code)
        assert row["status"] == "pass", row
        # Said honestly: some steps had no counterpart on the other rank.
        assert "took together" in row["detail"] and "Join()" in row["detail"], row["detail"]
    assert _check(data, "DDP129")["status"] == "pass"
    # Rank 0 made 4 steps an epoch, rank 1 made 5 (3 epochs): each rank's record keeps its own count.
    assert sorted(r["steps"] for r in data["run"]["ranks"]) == [12, 15]
    assert_no_survivors(mark)

    # The same script with rank 1's gradients scaled in the step after the last Join(): still
    # found, at that step as the ranks number it together (rank 1's 15th).
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--fault", "scale-grad"], tmp_path)
    assert data is not None, proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    grads = finding(data, "DDP105")
    assert grads["details"]["step"] == 15, grads
    assert "0.weight" in grads["message"]
    assert_no_survivors(mark)
