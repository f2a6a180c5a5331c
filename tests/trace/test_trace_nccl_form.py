"""NCCL-form dumps (made from the recorded gloo ones: tests/trace/nccl_form.py), checked against
PyTorch's own analyzer, then read by `ddpcheck trace`: NCCL's states tell a stuck rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, run_cli
from tests.trace.nccl_form import write_set
from tests.trace.test_trace_recorded import DATA

SOURCE = str(FIXTURES / "trace")


def test_torch_analyzer_reads_the_nccl_form_and_names_the_same_culprit(tmp_path):
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    write_set(DATA / "healthy", tmp_path, {1: "started"})
    r = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(tmp_path),
                        "--prefix", "rank_"], capture_output=True, text=True, timeout=120)
    assert "Culprit rank 1; Error type: COLLECTIVE_STATE_MISMATCH" in r.stdout + r.stderr


def test_a_rank_that_never_completes_the_last_call_is_stuck(tmp_path):
    write_set(DATA / "healthy", tmp_path, {1: "started"})
    r = run_cli("trace", str(tmp_path), "--source", SOURCE, "--output-format", "json")
    assert r.returncode == 1, r.stderr
    (verdict,) = json.loads(r.stdout)["findings"]
    assert verdict["code"] == "DDP123" and verdict["ranks"] == [1]
    assert "rank 1 never completed it (state started)" in verdict["message"]
    assert "last frames: fixtures/trace/healthy.py:23 in main" in verdict["message"]


def test_every_rank_completed_is_healthy(tmp_path):
    write_set(DATA / "healthy", tmp_path, {})
    r = run_cli("trace", str(tmp_path), "--source", SOURCE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_nccl_form_shape_mismatch(tmp_path):
    write_set(DATA / "shape_mismatch", tmp_path, {})
    r = run_cli("trace", str(tmp_path), "--source", SOURCE, "--output-format", "json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["findings"][0]["code"] == "DDP128"
