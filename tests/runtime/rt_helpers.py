"""Helpers for the runtime tests: each one launches a real multi-rank gloo job on CPU through the
real entry point, `python -m ddpcheck run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "run"


def subprocess_env() -> dict[str, str]:
    """Our own checkout first on PYTHONPATH, so the tests also pass from an editable install."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("OMP_NUM_THREADS", None)  # torchrun sets 1 per worker; more is 7-20x slower on 2 cores
    return env


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    report: dict | None

    @property
    def codes(self) -> set[str]:
        return {f["code"] for f in self.report["findings"]}

    def check(self, code: str) -> dict:
        return next(c for c in self.report["run"]["checks"] if c["code"] == code)

    def status(self, code: str) -> str:
        return self.check(code)["status"]


def run_ddpcheck(args: list[str], tmp_path: Path, *, cwd: Path = ROOT, timeout: int = 150) -> Result:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "run", "--report", str(report), *args],
        cwd=cwd, env=subprocess_env(), capture_output=True, text=True, timeout=timeout,
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return Result(proc.returncode, proc.stdout, proc.stderr, data)
