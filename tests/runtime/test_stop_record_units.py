"""A rank's record when SIGTERM stops it (rank/stopping.py), in a plain process of its own: the
handler writes the record and then does what the process did with SIGTERM before."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

from rt_helpers import ROOT, subprocess_env

PRELUDE = """
import os, signal, sys, time
from ddpcheck.run.run_options import RunOptions
from ddpcheck.run.rank.session import Session
from ddpcheck.run.rank import stopping
session = Session(RunOptions(record_dir=sys.argv[1]))
session.taken = session.checked = 3
"""


def _run(body: str, tmp_path) -> tuple[subprocess.CompletedProcess[str], dict | None]:
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=60)
    path = tmp_path / "rank-0.json"
    return proc, json.loads(path.read_text()) if path.exists() else None


def test_sigterm_writes_the_record_and_still_ends_the_process_by_it(tmp_path):
    proc, record = _run("""
        assert stopping.install(session)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        print("survived")
        """, tmp_path)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "survived" not in proc.stdout
    assert record is not None and (record["step"], record["checked"], record["status"]) == (3, 3, "running")
    assert record["stopped"]["signal"] == "SIGTERM" and record["stopped"]["by"] == "handler"


def test_a_handler_the_script_had_still_runs_after_the_record_is_written(tmp_path):
    proc, record = _run("""
        seen = []
        signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
        assert stopping.install(session)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print("seen", seen)
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"seen [{int(signal.SIGTERM)}]" in proc.stdout
    assert record is not None and record["stopped"]["by"] == "handler"


def test_an_ignored_sigterm_stays_ignored(tmp_path):
    proc, record = _run("""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        assert not stopping.install(session)
        os.kill(os.getpid(), signal.SIGTERM)
        print("alive")
        """, tmp_path)
    assert proc.returncode == 0 and "alive" in proc.stdout, proc.stderr
    assert record is None


def test_a_forked_child_dies_by_sigterm_without_writing_the_rank_record(tmp_path):
    # A DataLoader worker is a forked child: torchrun's SIGTERM reaches it too (its process
    # group), and neither its copy of the session nor the rank's wakeup thread may act on it.
    proc, record = _run("""
        assert stopping.install(session)
        pid = os.fork()
        if pid == 0:
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        time.sleep(1.5)  # longer than the thread's grace: it must not end this process
        print("parent alive")
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"child {-signal.SIGTERM}" in proc.stdout and "parent alive" in proc.stdout
    assert record is None


def test_a_main_thread_blocked_outside_python_is_stopped_by_the_thread(tmp_path):
    # A blocking read with the signal masked in the main thread stands for a call in C++ that
    # does not return: the handler cannot run there, the thread writes and ends the process.
    proc, record = _run("""
        assert stopping.install(session)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        read, write = os.pipe()
        import threading
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
        os.read(read, 1)
        print("returned")
        """, tmp_path)
    assert proc.returncode == -signal.SIGTERM, proc.stdout + proc.stderr
    assert record is not None and record["stopped"]["by"] == "thread"
