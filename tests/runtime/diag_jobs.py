"""Helpers for the runtime tests of crashes, hangs, emulation and spawn-style scripts: run `python -m ddpcheck run ...` as a user would, with a
marker in the environment so that the test can look for any process of the run that survived."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
MARK = "DDPCHECK_TEST_MARK"


def cli_env(**extra: str) -> dict[str, str]:
    """This checkout first on PYTHONPATH (so the tests also pass from an editable install)."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [environ.get("PYTHONPATH")])])
    environ.pop("OMP_NUM_THREADS", None)  # torchrun sets 1 per worker; more is far slower on 2 cores
    environ["COLUMNS"] = "160"
    environ.update(extra)
    return environ


def fixture(name: str, tmp_path: Path) -> Path:
    """A private copy of fixtures/run/NAME, so that paths in the report are this test's."""
    target = tmp_path / name
    shutil.copy(FIXTURES / "run" / name, target)
    return target


def env(mark: str, **extra: str) -> dict[str, str]:
    return cli_env(**{MARK: mark, "DDPCHECK_EXCHANGE_TIMEOUT": "60", **extra})


def ddpcheck_run(args: list[str], tmp_path: Path, timeout: float = 240, **extra_env: str):
    """Run a job to the end; returns (completed process, JSON report or None, mark)."""
    mark = uuid.uuid4().hex
    report = tmp_path / f"report-{mark[:8]}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "run", "--report", str(report), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env(mark, **extra_env),
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return proc, data, mark


def survivors(mark: str) -> list[int]:
    """Pids of live processes whose environment carries `mark` (a run's processes, children included)."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                status = (entry / "status").read_text()
                if "State:\tZ" not in status:
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_no_survivors(mark: str) -> None:
    deadline = time.monotonic() + 10  # torchrun's own teardown may still be reaping
    while survivors(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = survivors(mark)
    for pid in left:  # do not leave them to the next test either
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"processes of the run survived it: {left}"


def codes(data: dict) -> list[str]:
    return [f["code"] for f in data["findings"]]


def finding(data: dict, code: str) -> dict:
    matches = [f for f in data["findings"] if f["code"] == code]
    assert matches, f"no {code} among {codes(data)}"
    return matches[0]
