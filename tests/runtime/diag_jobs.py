"""The crash, hang, emulation and spawn tests' short names for the shared helpers (tests/helpers.py):
a job runs as a user would run it, with a mark in its environment so that the test can look for
any of its processes that survived."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import FIXTURES, MARK, ROOT, assert_no_survivors, run_job, survivors
from tests.helpers import cli_env as _cli_env
from tests.helpers import copy_fixture as fixture

__all__ = ["FIXTURES", "MARK", "ROOT", "assert_no_survivors", "cli_env", "codes", "ddpcheck_run", "env",
           "finding", "fixture", "survivors"]


def cli_env(**extra: str) -> dict[str, str]:
    return _cli_env(columns=160, **extra)


def env(mark: str, **extra: str) -> dict[str, str]:
    return cli_env(**{MARK: mark, "DDPCHECK_EXCHANGE_TIMEOUT": "60", **extra})


def ddpcheck_run(args: list[str], tmp_path: Path, timeout: float = 240,
                 **extra_env: str) -> tuple[subprocess.CompletedProcess[str], dict | None, str]:
    """Run a job to the end; returns (completed process, JSON report or None, mark)."""
    job = run_job(args, tmp_path, timeout=timeout, env=cli_env(DDPCHECK_EXCHANGE_TIMEOUT="60", **extra_env))
    proc = subprocess.CompletedProcess([], job.returncode, job.stdout, job.stderr)
    return proc, job.report, job.mark


def codes(data: dict) -> list[str]:
    return [f["code"] for f in data["findings"]]


def finding(data: dict, code: str) -> dict:
    matches = [f for f in data["findings"] if f["code"] == code]
    assert matches, f"no {code} among {codes(data)}"
    return matches[0]
