"""The runtime tests' short names for the shared helpers (tests/helpers.py): each test launches a
real multi-rank gloo job on CPU through the real entry point, `python -m ddpcheck run`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import FIXTURES as _ALL_FIXTURES
from tests.helpers import ROOT, Job, cli_env, run_job

FIXTURES = _ALL_FIXTURES / "run"
Result = Job

__all__ = ["FIXTURES", "ROOT", "Result", "run_ddpcheck", "subprocess_env"]


def subprocess_env() -> dict[str, str]:
    """This checkout first on PYTHONPATH; the terminal width left as the test runner's."""
    return cli_env(columns=None)


def run_ddpcheck(args: list[str], tmp_path: Path, *, cwd: Path = ROOT, timeout: int = 150) -> Job:
    return run_job(args, tmp_path, cwd=cwd, timeout=timeout)
