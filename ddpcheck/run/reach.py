"""How far each rank got, how it ended, and which checks the run therefore never reached.

A check judges something that exists only from some point of the script on: the process group
(`init_process_group`), a DDP model, an optimizer step. Each check class says which point it needs
(`RuntimeCheck.needs`: "init", "ddp" or "step"). When no rank got that far — the script crashed,
exited, or was stopped before — the check did not fail and did not pass: it was *not reached*,
and the report says why, naming the first rank to stop and where:

    rank 1 crashed (KeyError: 'model.width' at train.py:34) before the model was wrapped in DDP
    the script exited with 0 at example.py:91 before init_process_group

Ranks record how far they got (`reached`: the time of each point) and how they ended (exit code,
the exception, the file:line of a `sys.exit`, the last line they printed); this module reads that
back after the job (the crash probe and launcher/judging.py). Torch-free.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ddpcheck.run.records import Record
from ddpcheck.run.verdict import NOT_REACHED, PASS, Verdict

# The points a run passes, in program order, and how the report names them.
POINTS = ("init", "ddp", "step")
BEFORE = {
    "init": "before init_process_group",
    "ddp": "before the model was wrapped in DDP",
    "step": "before the first optimizer step",
}

# A script that ran backward passes and ended well trained, only not through the point a check
# needs: it reduced its gradients or updated its parameters itself (ZeRO-style engines, a loop of
# all_reduce over p.grad). Said as it is, never as "ended before".
TRAINED_WITHOUT = {
    "ddp": "the script trained (backward passes) without wrapping a model in DDP",
    "step": "the script trained (backward passes) without a torch.optim optimizer step",
}


@dataclass(frozen=True)
class Ending:
    """How one rank's run ended."""

    rank: int
    how: str  # "returned", "exited", "crashed", "killed", "stopped" (by the launcher), "unknown"
    code: int | None  # the exit code (negative: the signal)
    where: str | None  # "train.py:91": the sys.exit or the innermost frame of the exception
    error: str | None  # "KeyError: 'model.width'"
    last_output: str | None  # the last line the rank printed
    at: float | None  # when (time.time()), for ordering
    reached: frozenset[str]
    consequence: bool = False  # failed only because another rank had (a broken connection)

    @property
    def first_missing(self) -> str | None:
        return next((p for p in POINTS if p not in self.reached), None)

    def describe(self) -> str:
        """'crashed (KeyError: 'x' at train.py:34)', 'exited with 0 at run.py:91', ..."""
        at = f" at {self.where}" if self.where else ""
        if self.how == "crashed":
            return f"crashed ({self.error}{at})" if self.error else f"crashed{at}"
        if self.how == "exited":
            return f"exited with {self.code}{at}"
        if self.how == "returned":
            return "ended"
        if self.how == "killed":
            return f"was killed by {_signal(self.code)}"
        if self.how == "stopped":
            return "was stopped by the launcher"
        return "ended without a record of how"


def _signal(code: int | None) -> str:
    if code is None or code >= 0:
        return "a signal"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _where(path: str | None, line: int | None) -> str | None:
    return f"{os.path.basename(path)}:{line}" if path and line else None


def ending(record: Record, exit_codes: Mapping[int, int]) -> Ending:
    rank = int(record.get("rank", 0))
    reached = set(record.get("reached", {}))
    if int(record.get("step") or 0) > 0:
        reached.add("step")
    crash = (record.get("probes") or {}).get("crash") or {}
    error = record.get("error") or {}
    code = record.get("exit_code")
    finished = record.get("status") == "finished"
    last = record.get("last_output")
    if finished and (crash or error):
        text = f"{crash.get('type') or error.get('type')}: {crash.get('message') or error.get('message', '')}".strip()
        return Ending(rank, "crashed", code, _where(crash.get("path"), crash.get("line")),
                      text.rstrip(":"), last, crash.get("time") or record.get("left_at") or record.get("ended_at"),
                      frozenset(reached), bool(crash.get("consequence")))
    if finished:
        site = record.get("exit_site")
        how = "exited" if site or code else "returned"
        return Ending(rank, how, code, site, None, last, record.get("left_at") or record.get("ended_at"),
                      frozenset(reached))
    launcher_code = exit_codes.get(rank)
    if launcher_code is not None and launcher_code < 0 and _signal(launcher_code) not in ("SIGTERM", "SIGKILL"):
        return Ending(rank, "killed", launcher_code, None, None, last, None, frozenset(reached))
    return Ending(rank, "stopped", launcher_code, None, None, last, None, frozenset(reached))


def endings(records: list[Record], exit_codes: Mapping[int, int]) -> list[Ending]:
    """Every rank's ending, root cause first: the rank that failed on its own first, then ranks
    that left early, then the consequences (broken connections), then ranks the launcher stopped."""
    def order(e: Ending) -> tuple[int, float, int]:
        group = 2 if e.consequence else {"crashed": 0, "killed": 0, "exited": 1, "returned": 1}.get(e.how, 3)
        return group, e.at if e.at is not None else float("inf"), e.rank

    return sorted((ending(r, exit_codes) for r in records), key=order)


def reason(point: str, ends: list[Ending], world_size: int) -> str | None:
    """Why `point` was never reached (None: some rank reached it)."""
    if not ends or any(point in e.reached for e in ends):
        return None
    first = ends[0]
    missing = first.first_missing or point
    if point in TRAINED_WITHOUT and first.how in ("exited", "returned") and not first.code \
            and any("backward" in e.reached for e in ends):
        return TRAINED_WITHOUT[point]
    if first.how in ("exited", "returned") and len({(e.how, e.code, e.where) for e in ends}) == 1 \
            and len(ends) >= world_size:
        who = "the script"
    else:
        who = f"rank {first.rank}"
    return f"{who} {first.describe()} {BEFORE[missing]}"


def apply(checks: dict[str, Verdict], needs: Mapping[str, str | None], ends: list[Ending],
          world_size: int) -> dict[str, Verdict]:
    """Checks whose point no rank reached become NOT_REACHED, with the reason as their detail. A
    pass stands: it rests on what did happen (init_process_group was called on every rank)."""
    out = dict(checks)
    for code, verdict in checks.items():
        point = needs.get(code)
        if point is None or verdict.status == PASS or verdict.details.get("at_end"):
            continue  # (a verdict judged at the end of the run rests on what happened, too)
        why = reason(point, ends, world_size)
        if why is not None:
            out[code] = replace(verdict, status=NOT_REACHED, detail=f"not reached: {why}", message=None,
                                ranks=(), details={**verdict.details, "not_reached": why,
                                                   "judged": verdict.status})
    return out


def early_exit(ends: list[Ending], world_size: int) -> dict[str, Any] | None:
    """A run in which every rank ended on its own (no crash) before it trained: no optimizer step
    and no backward pass (a hand-written update after a backward is training too)."""
    if not ends or any("step" in e.reached or "backward" in e.reached or e.how not in ("exited", "returned")
                       for e in ends):
        return None
    first = ends[0]
    return {"why": reason("step", ends, world_size), "rank": first.rank, "code": first.code,
            "where": first.where, "last_output": first.last_output}
