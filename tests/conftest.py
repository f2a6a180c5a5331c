"""Fixtures shared by every test; the helpers themselves live in tests/helpers.py (test modules
import them from there or, as older ones do, from here)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pytest

from tests.helpers import FIXTURES, ROOT, SESSION_MARK, cli_env, kill_survivors, run_cli

__all__ = ["FIXTURES", "ROOT", "cli_env", "run_cli"]


@pytest.fixture
def cli():
    return run_cli


# Every process the tests start inherits this (os.environ is what child environments are built
# from); pytest's own process does not show it, since /proc/PID/environ is its start-up environment.
# A fresh mark in every pytest process, never the inherited one: pytest-xdist's workers inherit
# their controller's environment, and with one shared mark the first worker to finish killed the
# others mid-run.
os.environ[SESSION_MARK] = uuid.uuid4().hex


# The jobs the tests start leave what a user's failed job keeps on purpose (torchrun's log that the
# report names, torchelastic's folders, Flight Recorder dumps) in the temporary folder: give the
# processes the tests start one of their own, removed when the test run ends.
_JOBS_TMP = tempfile.mkdtemp(prefix="ddpcheck-tests-")
os.environ["TMPDIR"] = _JOBS_TMP


def pytest_sessionfinish(session, exitstatus):
    """A process a test started and did not stop (a job cut short by a timeout, a helper's own
    Popen) must not outlive the test run."""
    left = kill_survivors(os.environ[SESSION_MARK], SESSION_MARK)
    if left:
        session.config.get_terminal_writer().line(f"killed {len(left)} process(es) the tests left running: {left}")
    shutil.rmtree(_JOBS_TMP, ignore_errors=True)
