"""The command line: `ddpcheck lint | run | rules | explain | config`.

Thin on purpose: parsing and wording live here, work lives in lint/, run/ and report/. Importing
this module imports neither torch nor libcst. `lint` has a parser of its own (lint/arguments.py)
so that a pre-commit run does not pay for typer's parameter machinery; the other commands are a
typer app (app.py).
"""

from __future__ import annotations

import os
import sys

from ddpcheck.errors import UserError


def _use_color(stream: object) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def _error(message: str) -> None:
    print(f"ddpcheck: error: {message}", file=sys.stderr)


def _lint(argv: list[str]) -> int:
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


def _run(argv: list[str]) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UserError(
            "`ddpcheck run` needs PyTorch, which is not installed; install it with "
            "`pip install 'ddpcheck[run]'` (or install a torch build for your platform first)"
        )
    from ddpcheck.run.launcher.entry import main as run_main

    return run_main(argv)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. Never lets a traceback from ddpcheck reach the user."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["run"]:
            # The run command's arguments belong to torchrun and the user's script: pass them raw.
            sys.exit(_run(argv[1:]))
        if argv[:1] == ["lint"]:
            sys.exit(_lint(argv[1:]))
        from ddpcheck.app import app

        app(args=argv, prog_name="ddpcheck")
    except UserError as err:
        _error(str(err))
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # `ddpcheck lint | head`: the reader left; say nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except SystemExit:
        raise
    except Exception as err:  # noqa: BLE001 — the last line of defence against tracebacks
        if os.environ.get("DDPCHECK_DEBUG"):
            raise
        _error(f"internal error: {type(err).__name__}: {err} (set DDPCHECK_DEBUG=1 for the traceback and please report it)")
        sys.exit(2)
