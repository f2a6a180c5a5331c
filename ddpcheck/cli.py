"""The command line: `ddpcheck lint | run | trace | rules | explain | config`.

Thin on purpose: parsing and wording live here, work lives in lint/, run/ and report/. Importing
this module imports neither torch nor libcst. `lint` has a parser of its own (lint/arguments.py)
so that a pre-commit run does not pay for typer's parameter machinery (commands.py holds lint and run,
which cli and app both reach); the other commands are a
typer app (app.py).
"""

from __future__ import annotations

import gc
import os
import sys

from ddpcheck import commands
from ddpcheck.errors import UserError


def _error(message: str) -> None:
    print(f"ddpcheck: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. Never lets a traceback from ddpcheck reach the user."""
    own_process = argv is None  # the console script's or `python -m ddpcheck`'s own command line
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["run"]:
            # The run command's arguments belong to torchrun and the user's script: pass them raw.
            sys.exit(commands.run(argv[1:]))
        if argv[:1] == ["trace"]:
            sys.exit(commands.trace(argv[1:]))
        if argv[:1] == ["lint"]:
            # A lint run collects its garbage itself, once per file (lint/parallel.py); the
            # automatic collections while libcst and the rules are imported find nothing to
            # free. A caller in this process gets its collector back; a process that is only
            # this command freezes what it holds at the end, which the interpreter's collection
            # at exit then does not walk (≈ 30 ms, an eighth of a one-file lint).
            collecting = gc.isenabled()
            gc.disable()
            try:
                sys.exit(commands.lint(argv[1:]))
            finally:
                if own_process:
                    gc.freeze()
                if collecting:
                    gc.enable()
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
