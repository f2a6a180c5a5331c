"""A rank's record when it is stopped from outside.

When one rank fails, torchrun stops the others with SIGTERM (sent to each rank's process group, so
its DataLoader workers get it too) and SIGKILLs whatever is left after its shutdown timeout (30 s);
torch.multiprocessing.spawn and `ddpcheck run` itself stop ranks the same way. A stopped rank never
reaches the end of its program, so without this its record would be whatever it last wrote, up to a
second and many steps old (a rank writes at most once a second): a judge would read stale counts,
a zero among them.

`install(session)` puts a SIGTERM handler in front of the disposition the process had (the
default: die by the signal). It writes the record, marked `stopped`, then does what that
disposition did, so a stopped rank still dies by SIGTERM (its exit code says it was stopped, not
that it crashed), and a handler installed before ddpcheck still runs. A handler the script
installs later replaces this one, as it would have replaced the default: the script decides what a
SIGTERM does, and the thread below still writes the record.

Python runs a signal handler only between bytecodes of the main thread. A rank blocked in C++ (a
collective, a store wait, a long kernel) would run it only when that call returns, and would be
SIGKILLed at the end of the launcher's timeout instead of ending at once. So the signal also
wakes a daemon thread (`signal.set_wakeup_fd`): if the main thread has not run the handler within
GRACE_S, the thread writes the record, and, when the disposition before was the default, ends the
process by SIGTERM as the default would have.

Forked children (DataLoader workers) get the disposition and the wakeup descriptor back as they
were: a worker's SIGTERM must neither write the rank's record nor wake the rank's thread.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from ddpcheck.run.run_options import ENV_REHEARSE

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

GRACE_S = 1.0  # how long the main thread has to run the handler before the thread stands in
SIGNAL = signal.SIGTERM

_Handler = Callable[[int, FrameType | None], Any]


class _Stop:
    def __init__(self, session: Session, previous: _Handler | int) -> None:
        self.session = session
        self.previous = previous
        self.pid = os.getpid()
        self.handled = threading.Event()
        self.pipe: tuple[int, int] | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() == self.pid:
            self.handled.set()
            self.session.stopped(signal.Signals(signum).name, "handler")
        _pass_on(self.previous, signum, frame)

    def watch(self) -> None:
        """The daemon thread: read the signal numbers the wakeup descriptor carries."""
        assert self.pipe is not None
        while True:
            try:
                data = os.read(self.pipe[0], 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            if int(SIGNAL) not in data or self.handled.wait(GRACE_S) or os.getpid() != self.pid:
                continue
            # The main thread is inside a call that does not return (or the script's own handler
            # took the signal): write the record from here.
            for _ in range(3):  # the main thread may change a dict while it is dumped
                try:
                    self.session.stopped(SIGNAL.name, "thread")
                    break
                except RuntimeError:
                    time.sleep(0.01)
            if signal.getsignal(SIGNAL) == self.handler and self.previous == signal.SIG_DFL:
                _die_by(SIGNAL)

    def after_fork_in_child(self) -> None:
        global _installed
        if _installed is self:  # the child may become a rank of its own (a forked worker)
            _installed = None
        try:
            if signal.getsignal(SIGNAL) == self.handler:
                signal.signal(SIGNAL, self.previous)
            if self.pipe is not None:
                mine = signal.set_wakeup_fd(-1)
                if mine != self.pipe[1]:  # someone else's since: leave it
                    signal.set_wakeup_fd(mine)
                os.close(self.pipe[0])
                os.close(self.pipe[1])
                self.pipe = None
        except (OSError, ValueError):
            pass


_installed: _Stop | None = None


def install(session: Session) -> bool:
    """Write `session`'s record when the process gets SIGTERM (see the module's docstring). Only
    from the main thread, once per process; True when installed."""
    global _installed
    if _installed is not None or threading.current_thread() is not threading.main_thread():
        return False
    if os.environ.get(ENV_REHEARSE):
        # A rehearsal runs each rank alone, and ends one past its time limit itself (SIGKILL);
        # its report reads the main thread's stack from faulthandler, which a thread here would
        # muddle.
        return False
    try:
        previous = signal.getsignal(SIGNAL)
    except ValueError:
        return False
    # Ignored: nothing stops this rank by SIGTERM. None: a handler set from C, which cannot be
    # chained to from Python.
    if previous is None or previous == signal.SIG_IGN:
        return False
    stop = _Stop(session, previous)
    try:
        signal.signal(SIGNAL, stop.handler)
    except (OSError, ValueError):
        return False
    _installed = stop
    os.register_at_fork(after_in_child=stop.after_fork_in_child)
    _start_thread(stop)
    return True


def _start_thread(stop: _Stop) -> None:
    read, write = os.pipe()  # (not inherited by exec'd children)
    try:
        os.set_blocking(write, False)
        old = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except (OSError, ValueError):
        os.close(read)
        os.close(write)
        return
    if old != -1:  # the descriptor of something else in this process: leave it in place
        signal.set_wakeup_fd(old)
        os.close(read)
        os.close(write)
        return
    stop.pipe = (read, write)
    threading.Thread(target=stop.watch, name="ddpcheck-stop", daemon=True).start()


def _pass_on(previous: _Handler | int, signum: int, frame: FrameType | None) -> None:
    """What the process did with the signal before ddpcheck's handler came in front."""
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _die_by(sig: signal.Signals) -> None:
    """End the process by `sig` with its default action, from a thread other than the main one
    (Python lets only the main thread change a disposition: libc's signal() does it here)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(int(sig), None)  # SIG_DFL is the null handler
        os.kill(os.getpid(), sig)
    except (OSError, AttributeError):
        pass
    time.sleep(1.0)
    print("ddpcheck: could not end this rank by SIGTERM; ending it with SIGKILL", file=sys.stderr)
    os.kill(os.getpid(), signal.SIGKILL)
