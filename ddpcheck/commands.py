"""The commands that do not go through typer: `ddpcheck lint` (its own light parser, so a
pre-commit run does not pay for typer), `ddpcheck run` (its arguments belong to torchrun and the
user's script) and `ddpcheck trace` (Flight Recorder dumps; it reaches lint only through
`lint_for_causes` here, so trace/ stays free of lint internals). cli.py dispatches to them directly; app.py lists them in `ddpcheck --help`.
Importing this module imports neither torch nor libcst."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ddpcheck.errors import UserError

if TYPE_CHECKING:
    from ddpcheck.findings import Finding


def _use_color(stream: object) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def lint(argv: list[str]) -> int:
    from ddpcheck.lint.arguments import UsageError, parse, usage_error

    try:
        options = parse(argv, color=_use_color(sys.stdout))
    except UsageError as err:
        sys.stderr.write(usage_error(str(err)))
        return 2
    if options is None:  # --help
        return 0
    from ddpcheck.lint.command import run_lint

    return run_lint(options)


def run(argv: list[str]) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UserError(
            "`ddpcheck run` needs PyTorch, which is not installed; install it with "
            "`pip install 'ddpcheck[run]'` (or install a torch build for your platform first)"
        )
    from ddpcheck.run.launcher.entry import main as run_main

    return run_main(argv)


def lint_for_causes(paths: list[str]) -> list[Finding]:
    """The static findings in these files, with the settings that apply to each (what `ddpcheck
    lint` would report, ignoring the cache so nothing is written); unreadable files give none."""
    from ddpcheck.config import SettingsResolver
    from ddpcheck.catalog import lint_codes
    from ddpcheck.lint.runner import lint_files

    known = lint_codes()
    resolver = SettingsResolver(known)
    shown = [p if os.path.relpath(p).startswith("..") else os.path.relpath(p) for p in paths]
    return lint_files([Path(p) for p in shown], resolver, jobs=1, cache=None, known=known).findings


def trace(argv: list[str]) -> int:
    from ddpcheck.trace.command import run as run_trace

    return run_trace(argv, lint_for_causes)
