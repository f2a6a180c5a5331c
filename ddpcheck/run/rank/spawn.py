"""In-rank support for scripts that start their own workers (`torch.multiprocessing.spawn`).

- Under the launcher, `install_guard()` turns a hidden `mp.spawn` call (one the launcher could not
  see in the script) into a clear error (DDP126) instead of N jobs that wait for each other. For a
  script that runs either way (launcher/plan.py's fallback), a rank that calls the spawn before
  `init_process_group` fails the same way but quietly (no traceback), its record saying where
  (`spawn_called`), and when every rank did so the launcher runs the script again with the plain
  interpreter.
- In a plain-interpreter run, every process's `torch.multiprocessing.spawn._wrap` (the function
  each worker starts in) runs the worker through `_run_worker`, with that process's session, so
  that a worker ends like a rank started by torchrun: its record written (with the exception it
  died of) and an exit that cannot abort at interpreter teardown.
- `adopt_identity` lets such a worker learn its rank from `init_process_group`'s arguments.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import sys
from typing import Any, Callable, NoReturn

from ddpcheck.run.run_options import ENV_SPAWN_FALLBACK
from ddpcheck.run.rank import ending, sites, stopping
from ddpcheck.run.rank.session import Session

_SPAWNERS = ("spawn", "start_processes")


class SpawnUnderLauncherError(RuntimeError):
    """mp.spawn called inside a rank that torchrun started."""

    quiet = False  # leave without printing the traceback (the launcher says what happens next)


def install_guard(session: Session) -> None:
    """In a rank started by the launcher: refuse mp.spawn with a clear message, not a hang."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        where = sites.call_site()
        world = os.environ.get("WORLD_SIZE", "?")
        message = (
            f"the script calls torch.multiprocessing.spawn{' at ' + where if where else ''} inside a rank "
            f"that the launcher started ({world} ranks would each start their own job and wait forever). "
            "Rerun with `ddpcheck run --spawn script.py` (no --nproc), or read LOCAL_RANK/WORLD_SIZE instead."
        )
        error = SpawnUnderLauncherError(message)
        if os.environ.get(ENV_SPAWN_FALLBACK) == "1" and not dist.is_initialized():
            session.meta["spawn_called"] = where or "?"
            error.quiet = True  # the launcher reruns the script plainly (or reports DDP126)
        raise error

    for name in _SPAWNERS:
        if hasattr(mp, name):
            setattr(mp, name, refuse)


def adopt_identity(session: Session, kwargs: dict[str, Any]) -> None:
    """A worker that a spawn-style script started learns its rank from init_process_group's
    arguments, not from torchrun's environment."""
    rank, world = kwargs.get("rank"), kwargs.get("world_size")
    if isinstance(rank, int) and rank >= 0:
        session.become_rank(rank)
        stopping.install(session)  # (any process that imports torch has a session; a rank, this one)
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("LOCAL_RANK", str(rank))
    if isinstance(world, int) and world > 0:
        session.world_size = session.meta["world_size"] = world
        os.environ.setdefault("WORLD_SIZE", str(world))


def install_worker_entry(session: Session) -> None:
    """Run every worker this process starts, or is, through `_run_worker` with `session`.

    torch's spawn starts each worker in `torch.multiprocessing.spawn._wrap(fn, i, args,
    error_file)`; the replacement keeps that name, so the parent pickles it by reference and each
    fresh worker interpreter resolves it to its own replacement, bound to its own session (a
    forked worker keeps the parent's)."""
    module = importlib.import_module("torch.multiprocessing.spawn")
    original: Any = getattr(module, "_wrap", None)
    if original is None or getattr(original, "__ddpcheck__", False):
        return

    @functools.wraps(original)
    def _wrap(fn: Callable[..., Any], i: int, args: tuple[Any, ...], error_file: str) -> Any:
        return original(functools.partial(_run_worker, session, fn), i, args, error_file)

    setattr(_wrap, "__ddpcheck__", True)
    setattr(module, "_wrap", _wrap)


def _run_worker(session: Session, fn: Callable[..., Any], index: int, *args: Any) -> None:
    if "RANK" not in os.environ:
        # Until init_process_group says otherwise, worker i is rank i (as mp.spawn's examples have it).
        session.become_rank(index)
    if "LOCAL_RANK" not in os.environ:  # worker i of this node: its GPU is cuda:i
        session.local_rank = session.meta["local_rank"] = index
    stopping.install(session)
    try:
        fn(index, *args)
    except SystemExit as exc:
        ending.ended(exc)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        _finish(session, code, None)
        raise
    except BaseException as exc:
        ending.ended(exc)
        _finish(session, 1, exc)
        raise  # torch's spawn sends the traceback to the parent
    _finish(session, 0, None)
    atexit._run_exitfuncs()
    ending.leave(0)


def _finish(session: Session, code: int, error: BaseException | None) -> None:
    try:
        session.finish(code, error)
    except Exception as exc:  # noqa: BLE001
        print(f"ddpcheck: could not write the worker's record: {exc}", file=sys.stderr)
