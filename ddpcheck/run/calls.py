"""The collectives a rank entered, as values that can be compared across ranks. Torch-free: the
ranks' hang watchdog and the launcher's judges share it.

A `Call` is one collective on one rank: the user's own (`all_reduce`, `barrier`, ...) and those DDP
runs on the user's behalf (the gradient all-reduce inside `loss.backward()`, the buffer broadcast in
the forward, the broadcasts of its construction). Two ranks agree on a call when its operation and
its *signature* agree: what every rank must pass alike (dtype and shape, reduce op, root rank, DDP's
bucket sizes). Where in the user's code it was called is not part of it: the same collective may be
written on two lines of two branches.

`first_mismatch` aligns the calls the ranks entered by their sequence number on each group and
returns the first one where they differ, or where some ranks never arrived.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

WORLD = "world"  # the group label of the default group and of any group that spans every rank

# Operations ddpcheck records for the collectives DDP runs itself.
DDP_BACKWARD = "ddp.backward"
DDP_BUFFERS = "ddp.buffers"
DDP_INIT = "ddp.init"
_DISPLAY = {
    DDP_BACKWARD: "DDP's gradient all-reduce",
    DDP_BUFFERS: "DDP's buffer broadcast",
    DDP_INIT: "DDP's start-up broadcast of parameters and buffers",
}
# Point-to-point calls pair one sender with one receiver: their sequences differ by design.
POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})


class Call(NamedTuple):
    """One collective one rank entered (a tuple: made on every collective, it must be cheap)."""

    seq: int  # 1-based: the how-manieth collective this rank entered on `group`
    op: str
    sig: str  # what every rank must pass alike, e.g. "float32[4]", "float32[4] max", "1 bucket: 772 B"
    site: str | None  # the user's file:line that made the call (for DDP's: the forward or backward)
    step: int  # optimizer steps this rank had completed when it entered the call
    group: str = WORLD

    @property
    def key(self) -> tuple[str, str]:
        return self.op, self.sig

    @property
    def ddp(self) -> bool:
        return self.op.startswith("ddp.")

    def what(self) -> str:
        """'all_reduce float32[5]', "DDP's gradient all-reduce (1 bucket: 772 B)"."""
        if self.op in _DISPLAY:
            return _DISPLAY[self.op] + (f" ({self.sig})" if self.sig else "")
        return f"{self.op} {self.sig}".rstrip()

    def where(self) -> str:
        """' in loss.backward() at train.py:23 (step 4)', ' at stats.py:10 (after step 2)'."""
        text = ""
        if self.site:
            code = source_of(self.site) if self.ddp else None
            text = (f" in {code}" if code else "") + f" at {short(self.site)}"
        if self.op in (DDP_BACKWARD, DDP_BUFFERS):
            return text + f" (step {self.step + 1})"
        return text + (f" (after step {self.step})" if self.step else " (before the first optimizer step)")

    def describe(self) -> str:
        return self.what() + self.where()

    def to_json(self) -> list[Any]:
        return [self.seq, self.op, self.sig, self.site, self.step, self.group]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> "Call":
        seq, op, sig, site, step, group = data
        return cls(int(seq), str(op), str(sig), site, int(step), str(group))


def short(site: str) -> str:
    """'/home/me/train.py:23' -> 'train.py:23'."""
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def source_of(site: str, limit: int = 48) -> str | None:
    """The code at `file:line` without its comment, when short enough to quote in a message."""
    path, _, line = site.rpartition(":")
    if not line.isdigit():
        return None
    text = linecache.getline(path, int(line)).strip()
    if "#" in text:
        text = text.split("#", 1)[0].rstrip()
    return text if text and len(text) <= limit and "\n" not in text else None


@dataclass(frozen=True)
class CallLog:
    """What one rank has entered on one group: how many calls, the last few of them, and the one it
    is inside now (entered, not left), if any."""

    entered: int
    recent: tuple[Call, ...]  # ascending seq, the last ones only
    current: Call | None = None

    def at(self, seq: int) -> Call | None:
        for call in self.recent:
            if call.seq == seq:
                return call
        return None

    def to_json(self) -> dict[str, Any]:
        return {"entered": self.entered, "recent": [c.to_json() for c in self.recent],
                "current": None if self.current is None else self.current.seq}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CallLog":
        recent = tuple(Call.from_json(c) for c in data.get("recent", ()))
        seq = data.get("current")
        current = next((c for c in recent if c.seq == seq), None) if seq is not None else None
        return cls(int(data.get("entered", 0)), recent, current)


@dataclass(frozen=True)
class Side:
    """Ranks that entered the same call (operation and signature) at one sequence number."""

    ranks: tuple[int, ...]
    calls: tuple[Call, ...]  # one per rank, in rank order

    @property
    def call(self) -> Call:
        return self.calls[0]

    def describe(self) -> str:
        """'ranks 0, 1, 3 all_reduce float32[4] at stats.py:10 (after step 2)'; every distinct line."""
        places = []
        for call in self.calls:
            where = call.where()
            if where not in places:
                places.append(where)
        return f"{ranks_text(self.ranks)} {self.call.what()}" + " and".join(places)


@dataclass(frozen=True)
class Mismatch:
    """The first call at which the ranks of one group disagree."""

    group: str
    seq: int
    sides: tuple[Side, ...]  # biggest first; one side only when the rest never arrived
    missing: tuple[int, ...]  # ranks that had not entered call #seq
    last_of_missing: Mapping[int, Call | None]  # their last call on this group

    @property
    def odd_ranks(self) -> tuple[int, ...]:
        """The ranks that went their own way: the smaller sides, or those that never arrived;
        every rank when no side is the bigger one (two ranks disagree: either may be wrong)."""
        if len(self.sides) > 1:
            if len(self.sides[0].ranks) == len(self.sides[1].ranks):
                return tuple(sorted(r for side in self.sides for r in side.ranks))
            return tuple(sorted(r for side in self.sides[1:] for r in side.ranks))
        return self.missing

    def message(self) -> str:
        """'call #2: rank 2 all_reduce float32[5] at stats.py:10, ranks 0, 1, 3 all_reduce float32[4] ...'"""
        on = "" if self.group == WORLD else f" on the group of {self.group}"
        head = f"call #{self.seq}{on}: "
        parts = [side.describe() for side in sorted(self.sides, key=lambda s: (len(s.ranks), s.ranks))]
        if self.missing:
            gone = []
            for rank in self.missing:
                last = self.last_of_missing.get(rank)
                gone.append(f"rank {rank} never entered it (its last was call #{last.seq}, "
                            f"{last.describe()})" if last else f"rank {rank} never entered it (nor any before)")
            parts += gone
        return head + ", ".join(parts)


def first_mismatch(logs: Mapping[int, CallLog], group: str = WORLD) -> Mismatch | None:
    """The first call, in sequence order, that the ranks in `logs` did not all enter alike.

    Calls older than some rank's window of recent calls cannot be compared and are taken as equal
    (the running hash exchanged at checked steps covers them)."""
    if len(logs) < 2:
        return None
    lo = max((log.recent[0].seq if log.recent else log.entered + 1) for log in logs.values())
    hi = max(log.entered for log in logs.values())
    for seq in range(max(lo, 1), hi + 1):
        entered = {r: log.at(seq) for r, log in logs.items() if log.entered >= seq}
        known = {r: c for r, c in entered.items() if c is not None}
        if not known:
            continue
        by_key: dict[tuple[str, str], list[int]] = {}
        for rank in sorted(known):
            by_key.setdefault(known[rank].key, []).append(rank)
        missing = tuple(sorted(r for r in logs if logs[r].entered < seq))
        if len(by_key) == 1 and not missing:
            continue
        sides = tuple(sorted((Side(tuple(rs), tuple(known[r] for r in rs)) for rs in by_key.values()),
                             key=lambda s: (-len(s.ranks), s.ranks)))
        last = {r: logs[r].at(logs[r].entered) for r in missing}
        return Mismatch(group, seq, sides, missing, last)
    return None


def ranks_text(ranks: Iterable[int]) -> str:
    """'rank 2', 'ranks 0 and 1', 'ranks 1–3', 'ranks 0, 1, 3'."""
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) == 2:
        return f"ranks {rs[0]} and {rs[1]}"
    if rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}–{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs))


def size_text(nbytes: int) -> str:
    """772 -> '772 B', 4096 -> '4.0 KiB', 25 MiB -> '25.0 MiB'."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def buckets_text(sizes: Sequence[int]) -> str:
    """DDP's gradient buckets as a signature: '1 bucket: 772 B', '3 buckets: 1.0 MiB, 25.0 MiB, 4.0 KiB'."""
    shown = ", ".join(size_text(s) for s in sizes[:6]) + (", ..." if len(sizes) > 6 else "")
    return f"{len(sizes)} bucket{'s' if len(sizes) != 1 else ''}: {shown}"
