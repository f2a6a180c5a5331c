"""How far this rank got and how it ended, for the launcher's report (launcher/reach.py).

Written into the rank's record: `reached` (when the rank first passed each point of a DDP run:
`init` = init_process_group returned, `ddp` = a DistributedDataParallel model was built,
`backward` = the first backward pass; the first optimizer step is the record's `step`), `exit_site` (the file:line of the `sys.exit` that ended
the script) and `last_output` (the last line the script printed, on stdout or stderr: a polite
early exit says why there).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ddpcheck.run.plain_text import plain

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

_exit_site: str | None = None
_failed_at: float | None = None
_left_at: float | None = None
_tails: list["_Tail"] = []


class _Tail:
    """A text stream that remembers the last non-empty line written through it (ddpcheck's own
    lines excepted) and otherwise is the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.last: str | None = None
        self.at = 0.0

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if isinstance(text, str):
            for line in reversed(plain(text).splitlines()):
                line = line.strip()
                if line and not line.startswith("ddpcheck:"):
                    self.last, self.at = line[:300], time.monotonic()
                    break
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def watch_output() -> None:
    """Wrap sys.stdout and sys.stderr (once) to remember the script's last line."""
    if _tails:
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            continue
        tail = _Tail(stream)
        _tails.append(tail)
        setattr(sys, name, tail)


def last_output() -> str | None:
    seen = [t for t in _tails if t.last]
    return max(seen, key=lambda t: t.at).last if seen else None


def ended(exc: BaseException) -> None:
    """Note how the user's program ended, as it ends: where it called sys.exit (or raised
    SystemExit), or when it raised (the time orders the ranks' failures)."""
    global _exit_site, _failed_at, _left_at
    _left_at = time.time()
    if not isinstance(exc, SystemExit):
        _failed_at = _left_at
        return
    from ddpcheck.run.rank.sites import innermost_user_frame

    try:
        frame = innermost_user_frame(exc.__traceback__)
    except Exception:  # noqa: BLE001 - a report detail, never worth an error
        frame = None
    if frame is not None:
        _exit_site = f"{os.path.basename(frame[0])}:{frame[1]}"


def leave(code: int) -> NoReturn:
    """End this rank's process now with `code`, once what it printed is out: the caller has
    written the rank's record. `os._exit` skips the interpreter's own exit, which under gloo
    sometimes dies of SIGABRT after the script has finished (and would not flush the streams)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def failed_at() -> float | None:
    return _failed_at


def capture(session: Session) -> None:
    """Stamp the points of the run as the rank passes them; say how it ended at its finish."""
    reached = session.meta.setdefault("reached", {})

    def mark(point: str) -> None:
        reached.setdefault(point, time.time())

    session.after_init.append(lambda: mark("init"))
    session.on_ddp_init.append(lambda ddp: mark("ddp"))

    def on_phase(name: str, begin: bool) -> None:
        # A backward pass is training even where no DDP model or torch.optim step follows it
        # (hand-written gradient reduction and updates): the run must not read as ended before it.
        if name == "backward" and begin and "backward" not in reached:
            mark("backward")

    session.on_phase.append(on_phase)

    def at_finish(exit_code: int, error: BaseException | None) -> None:
        session.meta["exit_site"] = _exit_site
        session.meta["left_at"] = _left_at or time.time()
        session.meta["last_output"] = last_output()

    session.before_finish.append(at_finish)
    watch_output()
