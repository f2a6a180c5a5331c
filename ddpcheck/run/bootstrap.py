"""What every rank runs: `python -u -m ddpcheck.run.bootstrap (--script PATH | --module NAME) ARGS...`.

torchrun starts this module in each worker (see launcher.py). It

1. reads the run's options from the environment (`DDPCHECK_RUN_CONFIG`, set by the launcher),
2. arms a lazy import hook: nothing of torch is touched until the user's code imports `torch`;
   right after `torch` has finished importing, `install_core` and each enabled probe's
   `install(session)` run (a process that never imports torch pays nothing),
3. runs the user's program exactly as torchrun would: `runpy` with `__name__ == "__main__"`, an
   absolute `__file__`, `sys.argv == [script, *args]`, `sys.path[0]` = the script's folder,
4. ends through a path that cannot abort at interpreter exit: record the exit code (`sys.exit(n)`
   keeps n, an uncaught exception gives 1 and its traceback is printed), run the atexit handlers,
   write the rank record, flush stdout/stderr and leave with `os._exit(code)`. (With gloo, a normal
   interpreter exit sometimes dies of SIGABRT after the script has finished.)

## The probe interface

A probe is a module `ddpcheck/run/probes/<name>.py` (one invariant each) with

- `PROBE = "<name>"`: the name `--checks` selects it by (see `options.PROBES`); `ALWAYS = True`
  installs it even when deselected (a guard the run needs, e.g. the tcp:// rewrite);
- `install(session) -> None`: called in each rank once torch is imported. It patches torch or
  appends callbacks to the session's hook lists: `before_step` / `after_step`
  (`fn(optimizer, step)`, only for checked steps), `on_exchange` (`fn(step, rows)`: every rank's
  staged digests after the all-gather over ddpcheck's own gloo group), `before_init` (`fn(kwargs)`,
  may edit `init_process_group`'s arguments), `after_init`, `at_end` (`fn(why)`: final state);
- `judge(records: list[dict], context) -> list[Verdict]`: torch-free, runs in the launcher
  process after the job on every rank's record (see verdicts.py).

A probe emits data by writing JSON-serialisable values into `session.section(PROBE)` (its part of
the per-rank record), a per-step digest to compare across ranks with `session.stage(slot, int)`,
and a finding a single rank can tell on its own with `session.note(code, message, **details)`.
The record is flushed to `<record_dir>/rank-<R>.json` as the run goes (session.py), so a crashed
run still reports what it checked.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys
import traceback

from ddpcheck.run.options import RunOptions
from ddpcheck.run.session import Session, install_core

# Probe modules in install order; each must have PROBE and install(session).
PROBE_MODULES = (
    "ddpcheck.run.probes.rendezvous",
    "ddpcheck.run.probes.lifecycle",
    "ddpcheck.run.probes.shards",
    "ddpcheck.run.probes.set_epoch",
    "ddpcheck.run.probes.inputs",
    "ddpcheck.run.probes.grads",
    "ddpcheck.run.probes.params",
)


def install_probes(session: Session) -> None:
    from ddpcheck.run import diagnostics

    diagnostics.install(session)  # emulation, hangs, crash capture: before anything wraps torch
    install_core(session)
    for name in PROBE_MODULES:
        module = importlib.import_module(name)
        if session.enabled(module.PROBE) or getattr(module, "ALWAYS", False):
            module.install(session)


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Runs `callback` right after the `torch` package has finished importing, then retires."""

    def __init__(self, callback):
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            callback()

        loader.exec_module = exec_module
        return spec


def arm(session: Session) -> None:
    # Import the (torch-free) probe modules now: the user's script replaces sys.path[0], which
    # may be where ddpcheck was found.
    for name in PROBE_MODULES:
        importlib.import_module(name)

    def install():
        try:
            install_probes(session)
        except Exception:  # noqa: BLE001 - a broken probe must not stop the user's script
            print("ddpcheck: could not install its probes; the run goes on unchecked:\n"
                  + traceback.format_exc(), file=sys.stderr)

    if "torch" in sys.modules:
        install()
    else:
        sys.meta_path.insert(0, _TorchImportHook(install))


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
        return _exit_code(exc), None
    except BaseException as exc:  # noqa: BLE001 - an uncaught exception in the user's script
        traceback.print_exc()
        return 1, exc
    return 0, None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in ("--script", "--module"):
        print("usage: python -m ddpcheck.run.bootstrap (--script PATH | --module NAME) [ARGS...]",
              file=sys.stderr)
        os._exit(2)
    kind, name, args = argv[0][2:], argv[1], argv[2:]
    options = RunOptions.from_env() or RunOptions()
    session = Session(options, target=name)
    arm(session)
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
    from ddpcheck.run import bootstrap as _bootstrap

    _bootstrap.main()
