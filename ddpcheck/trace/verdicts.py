"""Comparisons and missing ranks → Findings in the runtime vocabulary (collective-mismatch,
uneven-work, collective-hang, rank-crashed: the runtime checks' own codes and pages), each pointing
at the user's own line when the frames name one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ddpcheck.catalog import code_named
from ddpcheck.findings import Finding, Related, Severity
from ddpcheck.trace.align import Comparison, Side
from ddpcheck.trace.dumps import Call, Frame
from ddpcheck.trace.source import locate


@dataclass(frozen=True)
class Place:
    """A user frame, with the local file it maps to (None: not found under --source)."""

    frame: Frame
    local: str | None

    @property
    def path(self) -> str:
        """The local file as lint shows it (relative to here when under it), else the frame's path."""
        if self.local is None:
            return self.frame.path
        rel = os.path.relpath(self.local)
        return self.local if rel.startswith("..") else rel

    def shown(self) -> str:
        return f"{self.path}:{self.frame.line}"


def places(call: Call | None, source: str) -> list[Place]:
    """The call's user frames, innermost first."""
    if call is None:
        return []
    return [Place(f, locate(f.path, source)) for f in call.user_frames()]


def ranks_text(ranks: tuple[int, ...]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}–{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _group_text(key: str) -> str:
    return "the default process group" if key == "0" else f"process group {key}"


def _at(call: Call | None, source: str) -> str:
    where = places(call, source)
    return f" at {where[0].shown()}" if where else ""


def _side_details(side: Side, source: str) -> dict[str, Any]:
    call = side.call or side.last
    return {
        "ranks": list(side.ranks),
        "arrived": side.call is not None,
        "seq": call.seq if call else None,
        "op": call.op if call else None,
        "shapes": [list(s) for s in call.input_sizes] if call else [],
        "dtypes": list(call.dtypes) if call else [],
        "state": call.state if call else None,
        "stack": [f"{p.shown()} in {p.frame.function}" for p in places(call, source)],
    }


def _finding(name: str, message: str, anchor: Call | None, source: str,
             ranks: tuple[int, ...], related: list[Related], details: dict[str, Any]) -> Finding:
    """A finding of the runtime check called `name` (its code comes from the catalogue)."""
    where = places(anchor, source)
    return Finding(code=code_named(name), name=name, message=message, severity=Severity.ERROR,
                   path=where[0].path if where else None, line=where[0].frame.line if where else None,
                   column=1 if where else None, ranks=ranks, related=tuple(related), details=details)


def _related(side: Side, call: Call | None, source: str, what: str) -> list[Related]:
    return [Related(p.path, p.frame.line, 1, f"{ranks_text(side.ranks)}: {what}")
            for p in places(call, source)[:1]]


def from_comparison(c: Comparison, source: str, elsewhere: dict[int, str] | None = None) -> Finding | None:
    """`elsewhere`: rank → where it waits in another group's divergence ("process group 2, call #2")."""
    details: dict[str, Any] = {"source": "flight-recorder", "group": c.group, "seq": c.seq,
                               "sides": [_side_details(s, source) for s in c.sides]}
    if c.kind == "mismatch":
        odd = c.sides[-1]
        parts = [f"{ranks_text(s.ranks)} {s.call.describe() if s.call else '?'}{_at(s.call, source)}"
                 for s in c.sides]
        message = (f"the ranks entered different collectives at call #{c.seq} of {_group_text(c.group)}: "
                   + "; ".join(parts) + ". Every rank must call the same collectives in the same order "
                   "with the same shapes")
        related = [r for s in c.sides[:-1] for r in _related(s, s.call, source, s.call.describe() if s.call else "")]
        anchor = next((s.call for s in reversed(c.sides) if places(s.call, source)), odd.call)
        return _finding("collective-mismatch", message, anchor, source,
                        tuple(sorted(r for s in c.sides for r in s.ranks)), related, details)
    if c.kind == "uneven":
        arrived, absent = c.sides[0], c.sides[1:]
        call = arrived.call
        gone = "; ".join(
            f"{ranks_text(s.ranks)} never arrived: "
            + (f"{'its' if len(s.ranks) == 1 else 'their'} last call was #{s.last.seq} {s.last.describe()}{_at(s.last, source)}" if s.last
               else "it recorded no call in this group")
            + _waits_elsewhere(s.ranks, elsewhere or {}, c.group)
            for s in absent)
        message = (f"ranks ran different numbers of collectives in {_group_text(c.group)}: "
                   f"{ranks_text(arrived.ranks)} entered call #{c.seq} "
                   f"{call.describe() if call else '?'}{_at(call, source)} and waited; {gone}. "
                   "Give every rank the same number of steps (same batches per epoch, a stop decided together)")
        related = [r for s in absent for r in _related(s, s.last, source, "last call before it stopped")]
        return _finding("uneven-work", message, call, source,
                        tuple(r for s in absent for r in s.ranks), related, details)
    if c.kind == "stuck":
        side = c.sides[0]
        frames = places(side.call, source)
        stack = ", ".join(f"{p.shown()} in {p.frame.function}" for p in frames[:3])
        message = (f"every rank entered call #{c.seq} {side.call.describe() if side.call else '?'} of "
                   f"{_group_text(c.group)}, and {ranks_text(side.ranks)} never completed it "
                   f"(state {side.call.state if side.call else '?'})"
                   + (f"; last frames: {stack}" if stack else "")
                   + ". Look at what those ranks do there: a device fault, a kernel that never ends, "
                     "or a network problem between their hosts")
        return _finding("collective-hang", message, side.call, source, side.ranks, [], details)
    return None


def _waits_elsewhere(ranks: tuple[int, ...], elsewhere: dict[int, str], group: str) -> str:
    notes = sorted({where for r in ranks if (where := elsewhere.get(r)) and not where.startswith(_group_text(group))})
    return f" (it waits in {', '.join(notes)})" if notes else ""


def waiting_places(comparisons: list[Comparison]) -> dict[int, str]:
    """Rank → the other group's call it waits in, for the ranks that arrived at a divergence."""
    found: dict[int, str] = {}
    for c in comparisons:
        if c.kind == "uneven":
            for r in c.sides[0].ranks:
                found.setdefault(r, f"{_group_text(c.group)}, call #{c.seq}")
    return found


def dead_ranks(missing: tuple[int, ...], world: int, last_seen: Call | None, source: str) -> Finding:
    """Ranks with no dump: PyTorch writes one per rank when the job times out, so a rank without
    one had died (or its file was lost) — the others waited for it."""
    message = (f"{ranks_text(missing)} of {world} wrote no Flight Recorder dump: it died (crashed, or "
               "was killed — an out-of-memory kill leaves no traceback) before the others timed out"
               + (f"; the others' last call was #{last_seen.seq} {last_seen.describe()}{_at(last_seen, source)}"
                  if last_seen else "")
               + ". Read that rank's log for its traceback or signal; if its file was only lost, pass it too")
    details: dict[str, Any] = {"source": "flight-recorder", "missing_ranks": list(missing), "world_size": world}
    return _finding("rank-crashed", message, last_seen, source, missing, [], details)
