"""End to end: real gloo jobs with the Flight Recorder on, their dumps, then `ddpcheck trace`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, ROOT, cli_env, run_cli

pytestmark = pytest.mark.slow

RANK_WRAPPER = ROOT / "tests" / "trace" / "fr_rank.py"


def run_job(script: str, nproc: int, out) -> None:
    """Run fixtures/trace/SCRIPT on NPROC gloo ranks; each rank dumps to OUT/rank_<r>."""
    env = cli_env(TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=str(out / "rank_"), OMP_NUM_THREADS="1")
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
         str(RANK_WRAPPER), "4", str(FIXTURES / "trace" / script)],
        env=env, capture_output=True, timeout=240, cwd=ROOT)


@pytest.mark.parametrize(("script", "nproc", "codes", "ranks"), [
    ("healthy.py", 2, [], []),
    ("rank_barrier.py", 4, ["DDP128", "DDP009"], [0, 1, 2, 3]),
    ("early_stop.py", 2, ["DDP129", "DDP035"], [0]),
    ("uneven_batch.py", 2, ["DDP129", "DDP034"], [1]),
    ("shape_mismatch.py", 2, ["DDP128"], [0, 1]),
    ("killed_rank.py", 3, ["DDP120"], [1]),
    ("subgroups.py", 3, ["DDP129", "DDP129"], [2]),
])
def test_real_job_dumps(tmp_path, script, nproc, codes, ranks):
    run_job(script, nproc, tmp_path)
    r = run_cli("trace", str(tmp_path), "--source", str(FIXTURES / "trace"), "--output-format", "json")
    assert r.returncode == (1 if codes else 0), r.stdout + r.stderr
    found = json.loads(r.stdout)["findings"]
    assert [f["code"] for f in found] == codes
    if codes:
        assert found[0]["ranks"] == ranks
        assert found[0]["path"] == os.path.join("fixtures", "trace", script)


def test_ddpcheck_run_writes_dumps_when_it_stops_a_hung_job_and_trace_replays_them():
    env = cli_env(OMP_NUM_THREADS="1")
    env.pop("TORCH_FR_DUMP_TEMP_FILE", None)
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    r = run_cli("run", "--nproc", "2", "--hang-timeout", "5", str(FIXTURES / "trace" / "rank_barrier.py"),
                env=env, timeout=240)
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(x for x in r.stderr.splitlines() if "Flight Recorder dumps are in" in x)
    folder = line.split("dumps are in ", 1)[1].split(";", 1)[0]
    try:
        assert sorted(os.listdir(folder)) == ["rank_0", "rank_1"]
        t = run_cli("trace", folder, "--source", str(FIXTURES / "trace"), "--output-format", "json")
        assert t.returncode == 1, t.stderr
        found = json.loads(t.stdout)["findings"]
        assert [f["code"] for f in found] == ["DDP128", "DDP009"]
        assert "rank 0 barrier at fixtures/trace/rank_barrier.py:26" in found[0]["message"]
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
