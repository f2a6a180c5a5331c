"""`init_process_group(init_method="tcp://...")` under `ddpcheck run` (torchrun, 2 gloo ranks):
the launcher's own address is no finding, and a store of the script's own is reported with what
torch really does with it, the script's own timeout included."""

from __future__ import annotations

import pytest

from diag_jobs import assert_no_survivors, codes, ddpcheck_run, finding, fixture

pytestmark = pytest.mark.slow


def _check(data: dict, code: str) -> dict:
    return next(c for c in data["run"]["checks"] if c["code"] == code)


def test_init_method_at_the_launchers_address_is_not_a_finding(tmp_path):
    script = fixture("tcp_init.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--at", "launcher"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DDP113" not in codes(data), codes(data)
    assert _check(data, "DDP113")["status"] == "pass"
    assert "init_method='tcp://" in _check(data, "DDP113")["detail"]
    assert_no_survivors(mark)


def test_own_store_names_the_wait_the_script_asked_for(tmp_path):
    script = fixture("tcp_init.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--at", "own", "--timeout", "45"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    message = finding(data, "DDP113")["message"]
    assert "tcp://127.0.0.1:29533" in message
    assert "rank 0 included, connects as a client to 127.0.0.1:29533" in message, message
    assert "45 s, the timeout the script passed" in message and "30 min" not in message, message
    assert "ddpcheck rewrote it to 'env://'" in message
    assert data["run"]["job"]["steps"] == 3  # the rewrite let the job train
    assert_no_survivors(mark)
