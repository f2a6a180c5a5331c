"""The record of how a rank died: written in the rank (`describe`, by the crash probe's capture,
or by the bootstrap when the script died before it imported torch and no capture was installed),
read back after the job (`read`, by the judges that name a crash: the crash probe, the nodes probe).

Torch-free, and it imports no probe: the probes that read a crash build on it.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ddpcheck.run.plain_text import plain
from ddpcheck.run.records import Record, section

SECTION = "crash"  # the part of the rank record that holds it

# A peer that went away shows up in the survivors as one of these, from gloo or the store.
_CONSEQUENCE = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|Socket closed|ProcessGroupGloo.*(closed|aborted)"
    r"|failed to recv|failed to send|Connection refused|Read error|Write error",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Crash:
    rank: int
    type: str
    message: str
    path: str | None
    line: int | None
    function: str | None
    traceback: str
    time: float
    consequence: bool  # broke because another rank died

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else "<no frame of the script>"


def describe(exc: BaseException, rank: int) -> dict[str, Any] | None:
    """What this rank died of, JSON-ready; None for an exit or an interrupt. Never raises."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return None
    try:
        from ddpcheck.run.rank import ending
        from ddpcheck.run.rank.sites import innermost_user_frame

        frame: tuple[str, int, str | None] | None = innermost_user_frame(exc.__traceback__)
        if frame is None and isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
            frame = (exc.filename, exc.lineno, None)  # raised while compiling the script: no frame of it ran
        message = plain(str(exc)).strip()
        return Crash(
            rank=rank,
            type=type(exc).__name__,
            message=message.splitlines()[0][:500] if message else "",
            path=frame[0] if frame else None,
            line=frame[1] if frame else None,
            function=frame[2] if frame else None,
            traceback=plain("".join(traceback.format_exception(exc)))[-6000:],
            time=ending.failed_at() or time.time(),
            consequence=bool(_CONSEQUENCE.search(message)),
        ).__dict__
    except Exception:  # noqa: BLE001 - reporting must not mask the user's exception
        return None


def read(records: list[Record]) -> list[Crash]:
    """The crashes the ranks recorded, root cause first."""
    crashes = []
    for record in records:
        data = section(record, SECTION)
        if data:
            try:
                crashes.append(Crash(**data))
            except TypeError:
                continue
    return sorted(crashes, key=lambda c: (c.consequence, c.time))
