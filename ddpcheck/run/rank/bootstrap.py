"""What every rank runs: `python -u -m ddpcheck.run.rank.bootstrap (--script PATH | --module NAME) ARGS...`.

torchrun starts this module in each worker (see launcher/command_line.py). It

1. reads the run's options from the environment (`DDPCHECK_RUN_CONFIG`, set by the launcher),
2. arms a lazy import hook: nothing of torch is touched until the user's code imports `torch`;
   right after `torch` has finished importing, rank/instrument.py installs ddpcheck's run-time
   support, the hook layer and the probes' captures (a process that never imports torch pays
   nothing),
3. runs the user's program exactly as torchrun would: `runpy` with `__name__ == "__main__"`, an
   absolute `__file__`, `sys.argv == [script, *args]`, `sys.path[0]` = the script's folder,
4. ends through a path that cannot abort at interpreter exit: record the exit code (`sys.exit(n)`
   keeps n, an uncaught exception gives 1 and its traceback is printed), run the atexit handlers,
   write the rank record, flush stdout/stderr and leave with `os._exit(code)`. (With gloo, a normal
   interpreter exit sometimes dies of SIGABRT after the script has finished.)
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import traceback

from ddpcheck.run.options import RunOptions
from ddpcheck.run.rank import ending, parent
from ddpcheck.run.rank.instrument import instrument_after_torch
from ddpcheck.run.rank.session import Session


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF  # what the OS keeps of it, as for a plain `python script.py`
    print(code, file=sys.stderr)  # sys.exit("message") prints the message and exits 1
    return 1


def run_target(kind: str, name: str, args: list[str]) -> tuple[int, BaseException | None]:
    """Run the user's program as `python SCRIPT` / `python -m MODULE` would; return its exit code."""
    try:
        if kind == "script":
            sys.argv = [name, *args]
            sys.path[0] = os.path.dirname(name)
            runpy.run_path(name, run_name="__main__")
        else:
            sys.argv = [name, *args]  # runpy puts the module's file in argv[0], like python -m
            sys.path[0] = os.getcwd()
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        ending.ended(exc)
        return _exit_code(exc), None
    except BaseException as exc:  # noqa: BLE001 - an uncaught exception in the user's script
        ending.ended(exc)
        if not getattr(exc, "quiet", False):  # ddpcheck's own spawn guard may leave quietly
            traceback.print_exc()
        return 1, exc
    return 0, None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in ("--script", "--module"):
        print("usage: python -m ddpcheck.run.rank.bootstrap (--script PATH | --module NAME) [ARGS...]",
              file=sys.stderr)
        os._exit(2)
    kind, name, args = argv[0][2:], argv[1], argv[2:]
    parent.die_with_parent()  # a SIGKILLed `ddpcheck run` takes its ranks with it
    options = RunOptions.from_env() or RunOptions()
    session = Session(options, target=name)
    instrument_after_torch(session)
    code, error = run_target(kind, name, args)
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    try:
        session.finish(code, error)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


if __name__ == "__main__":
    # Run the importable copy, so hooks and the user's `__main__` never share our globals.
    from ddpcheck.run.rank import bootstrap as _bootstrap

    _bootstrap.main()
