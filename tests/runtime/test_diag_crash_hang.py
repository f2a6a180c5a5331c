"""A rank that raises, and Ctrl-C: each is named in seconds, every rank is stopped, and no process
of the run survives it. (Hangs: test_hangs_uneven.py.)"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from diag_jobs import ROOT, assert_no_survivors, codes, ddpcheck_run, env, finding, fixture

pytestmark = pytest.mark.slow


def _line_of(path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if text in t)


def test_crash_on_rank_1_names_the_rank_and_the_line(tmp_path):
    script = fixture("crash_rank1.py", tmp_path)
    # A generous bound: the other rank must be stopped at once, not after a collective timeout.
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script)], tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["ranks"] == [1]
    assert crash["path"] == str(script)
    assert crash["location"]["line"] == _line_of(script, "raise ValueError")
    assert "rank 1 raised ValueError: planted fault at step 3" in crash["message"]
    assert "error_file" not in proc.stdout + proc.stderr
    assert "DDP120 rank-crashed" in proc.stdout
    # What was checked until the crash is still reported.
    assert data["run"]["job"]["steps"] >= 3 and len(data["run"]["ranks"]) == 2
    assert_no_survivors(mark)


def _project(tmp_path, entry: str):
    """The entry script and the project module it imports (netparts.py), side by side."""
    fixture("netparts.py", tmp_path)
    return fixture(entry, tmp_path)


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_a_spawned_worker_that_re_raises_the_message_crashes_at_the_original_line(tmp_path):
    # The worker body turns every error into ValueError(str(e)); the TypeError it passes on was
    # raised in another module of the project, which is the line to fix.
    script = _project(tmp_path, "config_spawn.py")
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--port", _free_port()], tmp_path, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["path"] == str(tmp_path / "netparts.py")
    assert crash["location"]["line"] == _line_of(tmp_path / "netparts.py", "return Net(**config)")
    assert (f"raised TypeError: netparts.Net() argument after ** must be a mapping, not NetConfig at "
            f"netparts.py:{crash['location']['line']} (in build_model), re-raised as ValueError at "
            f"config_spawn.py:{_line_of(script, 'raise ValueError(str(e))')} (in train)") in crash["message"]
    assert "failed the same way" in crash["message"]
    assert sorted(codes(data)) == ["DDP120", "DDP122", "DDP125"], codes(data)
    assert_no_survivors(mark)


def test_a_spawned_worker_that_re_raises_from_the_error_crashes_at_the_original_line(tmp_path):
    # `raise RuntimeError(f"worker {rank} failed: {e}") from e`: a prefix, the message kept.
    script = _project(tmp_path, "config_spawn.py")
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--port", _free_port(), "--chain"], tmp_path,
                                    timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["location"]["line"] == _line_of(tmp_path / "netparts.py", "return Net(**config)")
    assert crash["details"]["exception"] == "TypeError"
    assert crash["details"]["reraised"]["exception"] == "RuntimeError"
    assert crash["details"]["reraised"]["line"] == _line_of(script, "raise RuntimeError(")
    assert_no_survivors(mark)


def test_a_torchrun_main_that_logs_and_re_raises_crashes_at_the_original_line(tmp_path):
    script = _project(tmp_path, "config_torchrun.py")
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--config", "dataclass"], tmp_path, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["path"] == str(tmp_path / "netparts.py")
    assert crash["location"]["line"] == _line_of(tmp_path / "netparts.py", "return Net(**config)")
    assert (f"re-raised as RuntimeError at config_torchrun.py:{_line_of(script, 'raise RuntimeError(e)')} "
            "(in main)") in crash["message"]
    assert_no_survivors(mark)


def test_a_handler_with_its_own_message_crashes_at_its_raise_line(tmp_path):
    # `except KeyError: raise ValueError(f"unknown optimizer ...")` is the script's own report of
    # the error, so its line stays; main's RuntimeError(e) around it only passes it on.
    script = _project(tmp_path, "config_torchrun.py")
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--optimizer", "lamb"], tmp_path, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["path"] == str(script)
    assert crash["location"]["line"] == _line_of(script, 'raise ValueError(f"unknown optimizer')
    assert "raised ValueError: unknown optimizer 'lamb'; choose one of sgd, adam, adamw at config_torchrun.py:" \
        in crash["message"]
    assert "KeyError" not in crash["message"]
    assert_no_survivors(mark)


def test_a_rank_stopped_after_another_crashed_is_not_said_to_skip_the_ddp_forward(tmp_path):
    # Rank 0 raises at its first checkpoint, three fast steps in; rank 1, fed by DataLoader
    # workers, is stopped by the launcher before it writes its final record. What that record
    # last said (a DDP model, no forward yet) is not evidence that the forward was never called.
    script = fixture("rank0_checkpoint_crash_workers.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script)], tmp_path, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["ranks"] == [0]
    assert crash["location"]["line"] == _line_of(script, "torch.save(")
    assert "DDP109" not in codes(data), proc.stdout
    used = next(c for c in data["run"]["checks"] if c["code"] == "DDP109")
    assert used["status"] == "pass" and "DDP forward called" in used["detail"]
    assert_no_survivors(mark)


def test_ctrl_c_stops_every_rank_and_writes_the_partial_report(tmp_path):
    script = fixture("slow_steps.py", tmp_path)
    mark = uuid.uuid4().hex
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "ddpcheck", "run", "--nproc", "2", "--report", str(report),
                             str(script)], cwd=ROOT, env=env(mark), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = threading.Event()
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "ddpcheck-fixture: training" in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(120), "".join(lines)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    data = json.loads(report.read_text())
    stopped = finding(data, "DDP124")
    assert "interrupted after" in stopped["message"]
    assert data["run"]["job"]["steps"] >= 3  # what ran before the interrupt is there
    assert "DDP120" not in codes(data)
    assert_no_survivors(mark)


def test_rank_0_evaluating_while_the_others_wait_is_slow_not_hung(tmp_path):
    # Four hang timeouts of evaluation on rank 0 while rank 1 sits in a barrier: two computing
    # without progress (CPU busy), two walking a DataLoader (progress, but no collective).
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--hang-timeout", "2",
                                     str(fixture("slow_rank0_eval.py", tmp_path)), "8"], tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == []
    assert_no_survivors(mark)


@pytest.mark.parametrize("busy, writer", [("sleep", "handler"), ("store", "thread")])
def test_a_rank_stopped_after_its_steps_reports_every_step_it_made(tmp_path, busy, writer):
    # Both ranks make 5 steps within a second and meet at a barrier; then rank 1 raises and rank 0,
    # asleep in Python or blocked in a C++ store wait, is stopped by the launcher. Its record must
    # say 5 steps (it last wrote at its first step), and a rank blocked in C++ must still die by
    # SIGTERM at once, not by SIGKILL at the end of torchrun's shutdown timeout.
    script = fixture("stopped_after_steps.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), busy], tmp_path, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert crash["ranks"] == [1] and "rank 0 was stopped by the launcher" in crash["message"]
    assert data["run"]["job"]["failed_ranks"]["0"] == -signal.SIGTERM
    ranks = {r["rank"]: r for r in data["run"]["ranks"]}
    assert ranks[0]["status"] == "running"
    assert ranks[0]["stopped"]["signal"] == "SIGTERM" and ranks[0]["stopped"]["by"] == writer
    assert (ranks[0]["steps"], ranks[0]["checked_steps"]) == (5, 5)
    checks = {c["code"]: c for c in data["run"]["checks"]}
    assert checks["DDP105"]["detail"] == "identical on every rank at 5 checked steps"
    assert checks["DDP109"]["detail"] == "DDP forward called (10 times over all ranks)"
    assert "5 optimizer steps" in checks["DDP129"]["detail"]
    assert "at least" not in json.dumps(checks)
    assert_no_survivors(mark)
