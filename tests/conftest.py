"""Shared test helpers: run the real CLI in a subprocess, with this checkout importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def run_cli(*args: str, cwd: str | Path | None = None, input: str | None = None,
            env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m ddpcheck ARGS` as a user would run it; returns the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "ddpcheck", *args],
        cwd=cwd or ROOT,
        input=input,
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli
