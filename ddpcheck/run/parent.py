"""A rank must not outlive `ddpcheck run`, nor the torchrun agent of a `--nodes` node. Torch-free;
shared by the ranks (rank/bootstrap.py, rank/spawn_startup.py) and the extra node agents
(launcher/node_agent.py).

When the launcher is killed with SIGKILL (a CI runner's timeout), torchrun gets no chance to stop
its workers, which run in sessions of their own: a deadlocked job would sit there for gloo's
30 minutes. Two guards, both armed as a process starts:

- `die_with_parent()`: Linux's parent-death signal (prctl PR_SET_PDEATHSIG = SIGKILL), for a
  process whose parent is the launcher's main thread (torchrun's workers, a spawn-style script).
  The kernel delivers it the moment the parent dies. It is tied to the thread that forked the
  process, so it is only armed where that thread lives as long as the parent does.
- `watch_parent()`: a daemon thread that checks once a second that the parent is still the same
  process, for processes that a user's script forks from threads we do not know (mp.spawn).

The launcher's pid travels in ENV_LAUNCHER_PID; a process whose parent is already gone by the
time it arms the guard (it died during our start-up) leaves at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from ddpcheck.run.run_options import ENV_LAUNCHER_PID

_PR_SET_PDEATHSIG = 1
EXIT_CODE = 129  # as a shell reports a process ended by SIGHUP, "its terminal went away"


def _expected_parent() -> int | None:
    value = os.environ.get(ENV_LAUNCHER_PID, "")
    return int(value) if value.isdigit() else None


def die_with_parent(expected: int | None = None) -> bool:
    """Arm the parent-death signal; True when armed. Leaves at once if the parent is already gone."""
    expected = expected if expected is not None else _expected_parent()
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if expected is not None and os.getppid() != expected:
        os._exit(EXIT_CODE)  # the launcher died before the signal was armed
    return True


def watch_parent(interval_s: float = 1.0) -> threading.Thread:
    """A daemon thread that ends the process when its parent changes (the parent died)."""
    parent = os.getppid()

    def watch() -> None:
        event = threading.Event()
        while not event.wait(interval_s):
            if os.getppid() != parent:
                os._exit(EXIT_CODE)

    thread = threading.Thread(target=watch, name="ddpcheck-parent-watch", daemon=True)
    thread.start()
    return thread
