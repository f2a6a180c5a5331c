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
    # Set when the exception that left the script only passed on an earlier one's message: the
    # fields above then describe that earlier (original) exception, these the handler's raise.
    reraised_as: str | None = None
    reraised_path: str | None = None
    reraised_line: int | None = None
    reraised_function: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else "<no frame of the script>"


def describe(exc: BaseException, rank: int) -> dict[str, Any] | None:
    """What this rank died of, JSON-ready; None for an exit or an interrupt. Never raises.

    When the exception that left the script only re-raised an earlier one under another type
    (`except Exception as e: raise ValueError(str(e))`), the record names the earlier one, where
    it was raised in the user's code, and where it was re-raised (`original`)."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return None
    try:
        from ddpcheck.run.rank import ending
        from ddpcheck.run.rank.sites import innermost_user_frame

        raised: tuple[str, int, str | None] | None = innermost_user_frame(exc.__traceback__)
        if raised is None and isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
            raised = (exc.filename, exc.lineno, None)  # raised while compiling the script: no frame of it ran
        cause, first = original(exc)
        frame = raised if first is None else first
        message = plain(str(cause)).strip()
        reraised = cause is not exc
        return Crash(
            rank=rank,
            type=type(cause).__name__,
            message=message.splitlines()[0][:500] if message else "",
            path=frame[0] if frame else None,
            line=frame[1] if frame else None,
            function=frame[2] if frame else None,
            traceback=plain("".join(traceback.format_exception(exc)))[-6000:],
            time=ending.failed_at() or time.time(),
            consequence=bool(_CONSEQUENCE.search(message)),
            reraised_as=type(exc).__name__ if reraised else None,
            reraised_path=raised[0] if reraised and raised else None,
            reraised_line=raised[1] if reraised and raised else None,
            reraised_function=raised[2] if reraised and raised else None,
        ).__dict__
    except Exception:  # noqa: BLE001 - reporting must not mask the user's exception
        return None


def original(exc: BaseException) -> tuple[BaseException, tuple[str, int, str] | None]:
    """The earliest exception in `exc`'s chain that the later ones only passed on, with its
    innermost frame in the user's code; (exc, None) when `exc` is its own error.

    The chain followed is the one Python prints: `__cause__` (`raise ... from e`), else
    `__context__` (raised while handling it) unless `from None` suppressed it. A link counts when
    the later exception carries the earlier one (`RuntimeError(e)`) or its message: the same text
    (`ValueError(str(e))`), or the earlier message inside a longer one (`f"training failed: {e}"`)
    when that message is a sentence rather than a bare value such as a missing key. A handler that
    writes its own message (`except KeyError: raise ValueError(f"unknown dataset {name}")`) stays
    the error: its raise line is the user's own report. An earlier exception with no frame in the
    user's code (raised and wrapped inside a library) is passed over for the next one back."""
    from ddpcheck.run.rank.sites import innermost_user_frame

    found: tuple[BaseException, tuple[str, int, str] | None] = (exc, None)
    seen = {id(exc)}
    later = exc
    while True:
        earlier = later.__cause__ if later.__cause__ is not None else \
            None if later.__suppress_context__ else later.__context__
        if earlier is None or id(earlier) in seen or not _passes_on(later, earlier):
            return found
        seen.add(id(earlier))
        frame = innermost_user_frame(earlier.__traceback__)
        if frame is not None:
            found = (earlier, frame)
        later = earlier


def _passes_on(later: BaseException, earlier: BaseException) -> bool:
    """Whether `later` says nothing of its own beyond `earlier` (see `original`)."""
    if any(arg is earlier for arg in later.args):
        return True
    try:
        said, before = str(later).strip(), str(earlier).strip()
    except Exception:  # noqa: BLE001 - a __str__ that fails tells nothing
        return False
    if said == before:
        return bool(later.args)  # a bare `raise RuntimeError` over an empty message is not a copy
    if not before:
        return False
    quoted = (repr(earlier), f"{type(earlier).__name__}: {before}")
    return any(q in said for q in quoted) or (any(c.isspace() for c in before) and before in said)


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
