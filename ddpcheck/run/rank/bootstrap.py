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

from ddpcheck.run import parent
from ddpcheck.run.run_options import RunOptions
from ddpcheck.run.rank import ending, stopping
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
            print_user_traceback(exc)
        return 1, exc
    return 0, None


_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_RUNPY = (os.path.abspath(runpy.__file__), "<frozen runpy>")


def _ours(frame: traceback.FrameSummary) -> bool:
    return frame.filename.startswith(_OURS) or frame.filename in _RUNPY


def _strip_ours(te: traceback.TracebackException, seen: set[int]) -> None:
    """Leave out ddpcheck's frames (this bootstrap, runpy, the hook layer's wrappers around torch's
    functions): what `python script.py` would have shown. When the innermost frame is ddpcheck's,
    the error is ddpcheck's own and every frame stays (runpy's is the script's: a SyntaxError)."""
    if id(te) in seen:
        return
    seen.add(id(te))
    # An error that stands for one torch would raise on real hardware is the script's, not ours.
    stands_in = getattr(getattr(te, "exc_type", None), "stands_for_torch", False)
    if te.stack and (stands_in or te.stack[-1].filename in _RUNPY or not _ours(te.stack[-1])):
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _ours(f)])
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _strip_ours(linked, seen)


def print_user_traceback(exc: BaseException) -> None:
    """The traceback of an uncaught exception as the user's own script shows it, on stderr (the
    report keeps the full one)."""
    try:
        te = traceback.TracebackException.from_exception(exc)
        _strip_ours(te, set())
        text = "".join(te.format())
    except Exception:  # noqa: BLE001 - never lose the traceback to a formatting problem
        text = "".join(traceback.format_exception(exc))
    sys.stderr.write(text)
    sys.stderr.flush()


def _say_crash(session: Session, error: BaseException) -> None:
    """The crash probe's part of the record, which its capture fills only once torch is imported."""
    from ddpcheck.run.rank import crash_record

    mine = session.section(crash_record.SECTION)
    if not mine:
        mine.update(crash_record.describe(error, session.rank) or {})


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
    stopping.install(session)
    instrument_after_torch(session)
    code, error = run_target(kind, name, args)
    if error is not None:  # also when it died before importing torch (a SyntaxError, say)
        try:
            _say_crash(session, error)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    try:
        session.finish(code, error)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    ending.leave(code)


if __name__ == "__main__":
    # Run the importable copy, so hooks and the user's `__main__` never share our globals.
    from ddpcheck.run.rank import bootstrap as _bootstrap

    _bootstrap.main()
