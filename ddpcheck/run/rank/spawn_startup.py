"""Instrument a process of a spawn-style job when it first imports torch (armed by the start-up
hook in rank/startup/, which ddpcheck puts on PYTHONPATH for a plain-interpreter run).

A process that never imports torch pays one meta-path lookup. One that does gets a session and the
same instrumentation as a rank that torchrun started (rank/instrument.py). The script's own
process (the parent, which only spawns) writes no record; each worker it spawns becomes a rank
(rank/spawn.py).
"""

from __future__ import annotations

import os
import sys

PARENT_ENV = "DDPCHECK_SPAWN_PARENT"  # pid of the script's own process
_armed = False


def arm() -> None:
    global _armed
    if _armed:
        return
    _armed = True
    os.environ.setdefault(PARENT_ENV, str(os.getpid()))
    from ddpcheck.run import parent

    if os.environ[PARENT_ENV] == str(os.getpid()):
        parent.die_with_parent()  # the script's own process: started by `ddpcheck run` itself
    else:
        parent.watch_parent()  # a worker the script started, from a thread we do not know
    from ddpcheck.run.rank.torch_import import when_torch_imported

    when_torch_imported(_instrument)


def _instrument() -> None:
    try:
        from ddpcheck.run.run_options import RunOptions
        from ddpcheck.run.rank import spawn
        from ddpcheck.run.rank.instrument import instrument
        from ddpcheck.run.rank.session import Session

        parent = os.environ.get(PARENT_ENV) == str(os.getpid())
        session = Session(RunOptions.from_env() or RunOptions(), target=sys.argv[0] if sys.argv else "",
                          spawn_parent=parent)
        instrument(session)
        spawn.install_worker_entry(session)
    except Exception as exc:  # noqa: BLE001 - a broken hook must not stop the user's script
        print(f"ddpcheck: could not instrument this process; it runs unchecked: {exc}", file=sys.stderr)
