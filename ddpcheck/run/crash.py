"""Crash diagnosis: which rank raised what, where in the user's code.

In each rank, `describe(exc)` captures the exception — type, message, the innermost frame of the
user's code — into the rank's record before the rank exits. After the job, `crash_findings()`
reads them back and names the first real failure: a rank
whose collective broke only because a peer died ("Connection reset by peer") is a consequence, not
the cause. Ranks that died without a Python exception (a signal, e.g. the out-of-memory killer) are
reported from their exit codes. torchrun's own summary (`error_file: <N/A>`) is never shown.
"""

from __future__ import annotations

import os
import re
import signal
import time
import traceback
from dataclasses import dataclass

from ddpcheck.run import sites

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


SECTION = "crash"  # the part of the rank record (session.section) that holds it


def describe(exc: BaseException, rank: int) -> dict | None:
    """What this rank died of, JSON-ready; None for an exit or an interrupt. Never raises."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return None
    try:
        frame = sites.innermost_user_frame(exc.__traceback__)
        message = str(exc).strip()
        return Crash(
            rank=rank,
            type=type(exc).__name__,
            message=message.splitlines()[0][:500] if message else "",
            path=frame[0] if frame else None,
            line=frame[1] if frame else None,
            function=frame[2] if frame else None,
            traceback="".join(traceback.format_exception(exc))[-6000:],
            time=time.time(),
            consequence=bool(_CONSEQUENCE.search(message)),
        ).__dict__
    except Exception:  # noqa: BLE001 - reporting must not mask the user's exception
        return None


def read(records: list[dict]) -> list[Crash]:
    """The crashes the ranks recorded, root cause first."""
    crashes = []
    for record in records:
        data = record.get("probes", {}).get(SECTION)
        if data:
            try:
                crashes.append(Crash(**data))
            except TypeError:
                continue
    return sorted(crashes, key=lambda c: (c.consequence, c.time))


def root_cause(crashes: list[Crash]) -> Crash | None:
    """The first rank that failed on its own; the others are collateral."""
    return crashes[0] if crashes else None


def signal_name(exitcode: int) -> str | None:
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def crash_findings(records: list[dict], exitcodes: dict[int, int] | None = None) -> list:
    """Findings for the ranks that crashed: one for the root cause, naming the collateral ranks;
    one per rank killed by a signal that nobody (not torchrun, not ddpcheck) sent."""
    from ddpcheck.findings import Finding
    from ddpcheck.run.checks.cuda_not_emulated import CudaNotEmulatedCheck
    from ddpcheck.run.checks.rank_crashed import RankCrashed
    from ddpcheck.run.checks.rank_killed import RankKilled
    from ddpcheck.run.checks.spawn_under_launcher import SpawnUnderLauncher

    crashes = read(records)
    findings = []
    cause = root_cause(crashes)
    if cause is not None:
        others = sorted({c.rank for c in crashes if c.rank != cause.rank})
        check = {
            "CudaNotEmulated": CudaNotEmulatedCheck,
            "SpawnUnderLauncherError": SpawnUnderLauncher,
        }.get(cause.type, RankCrashed)
        also = f"; rank(s) {', '.join(map(str, others))} failed after it" if others else ""
        where = f" at {os.path.basename(cause.path)}:{cause.line} (in {cause.function})" if cause.path else ""
        message = f"rank {cause.rank} raised {cause.type}: {cause.message}{where}{also}"
        if check is not RankCrashed:
            message = f"rank {cause.rank}: {cause.message}"
        findings.append(
            Finding(
                code=check.code,
                name=check.name,
                message=message,
                severity=check.severity,
                path=cause.path,
                line=cause.line,
                ranks=(cause.rank,),
                hint=check.hint,
                details={
                    "exception": cause.type,
                    "traceback": cause.traceback,
                    "collateral_ranks": others,
                    "all": [{"rank": c.rank, "type": c.type, "message": c.message, "where": c.where} for c in crashes],
                },
            )
        )
    recorded = {c.rank for c in crashes}
    for rank, code in sorted((exitcodes or {}).items()):
        name = signal_name(code)
        # SIGTERM/SIGKILL are how torchrun stops the survivors once one rank failed.
        if rank in recorded or name is None or (cause is not None and name in ("SIGTERM", "SIGKILL")):
            continue
        if name in ("SIGTERM", "SIGINT"):
            continue
        findings.append(
            Finding(
                code=RankKilled.code,
                name=RankKilled.name,
                message=f"rank {rank} was killed by {name} without a Python exception"
                + (" (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""),
                severity=RankKilled.severity,
                ranks=(rank,),
                hint=RankKilled.hint,
                details={"exitcode": code, "signal": name},
            )
        )
    return findings
