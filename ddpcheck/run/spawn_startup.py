"""Instrument a process of a spawn-style job when it first imports torch (armed by the start-up
hook in ddpcheck/run/startup/).

A process that never imports torch pays one meta-path lookup. One that does gets a session and the
same probes as a rank that torchrun started (bootstrap.install_probes). The script's own process
(the parent, which only spawns) writes no record; each worker it spawns becomes a rank once its
init_process_group says which (diagnostics._adopt_identity).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

PARENT_ENV = "DDPCHECK_SPAWN_PARENT"  # pid of the script's own process
SESSION = None  # this process's Session, once torch is imported
_armed = False


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            instrument()

        spec.loader.exec_module = exec_module
        return spec


def arm() -> None:
    global _armed
    if _armed:
        return
    _armed = True
    os.environ.setdefault(PARENT_ENV, str(os.getpid()))
    if "torch" in sys.modules:
        instrument()
    else:
        sys.meta_path.insert(0, _AfterTorch())


def is_parent() -> bool:
    return os.environ.get(PARENT_ENV) == str(os.getpid())


def instrument() -> None:
    global SESSION
    if SESSION is not None:
        return
    try:
        from ddpcheck.run import spawn
        from ddpcheck.run.bootstrap import install_probes
        from ddpcheck.run.options import RunOptions
        from ddpcheck.run.session import Session

        session = Session(RunOptions.from_env() or RunOptions(), target=sys.argv[0] if sys.argv else "")
        if is_parent():
            session.record_path = None  # not a rank; a worker's rank-N.json is its own
        SESSION = session
        install_probes(session)
        spawn.install_worker_wrapper()
    except Exception as exc:  # noqa: BLE001 - a broken hook must not stop the user's script
        print(f"ddpcheck: could not instrument this process; it runs unchecked: {exc}", file=sys.stderr)
