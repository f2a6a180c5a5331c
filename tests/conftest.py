"""Fixtures shared by every test; the helpers themselves live in tests/helpers.py (test modules
import them from there or, as older ones do, from here)."""

from __future__ import annotations

import pytest

from tests.helpers import FIXTURES, ROOT, cli_env, run_cli

__all__ = ["FIXTURES", "ROOT", "cli_env", "run_cli"]


@pytest.fixture
def cli():
    return run_cli
