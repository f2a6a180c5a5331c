"""Line the ranks' collectives up by sequence id, group by group, and find where they part.

The Flight Recorder is a ring buffer: early calls may be gone, so ranks are compared from the
first sequence id every rank still holds. With gloo every entry stays `scheduled`, so states say
nothing there; with NCCL they tell a call that never completed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ddpcheck.trace.dumps import Call, Dump

Kind = Literal["mismatch", "uneven", "stuck", "healthy"]


@dataclass(frozen=True)
class Side:
    """Ranks that did the same thing at the point of divergence."""

    ranks: tuple[int, ...]
    call: Call | None  # None: these ranks made no call there (they never arrived)
    last: Call | None  # their last recorded call in the group


@dataclass(frozen=True)
class Comparison:
    group: str
    kind: Kind
    seq: int  # the first sequence id concerned (the last one for "healthy")
    sides: tuple[Side, ...]  # biggest first; for "stuck", the ranks that did not complete


def compare(dumps: list[Dump]) -> list[Comparison]:
    """One comparison per process group that at least one rank recorded calls in."""
    keys = sorted({k for d in dumps for k in d.calls}, key=lambda k: (k != "0", k))
    return [_compare_group(key, dumps) for key in keys]


def _compare_group(key: str, dumps: list[Dump]) -> Comparison:
    members = _members(key, dumps)
    by_rank = {d.rank: {c.seq: c for c in d.calls.get(key, ())} for d in dumps if d.rank in members}
    last = {r: (max(calls) if calls else 0) for r, calls in by_rank.items()}
    start = max((min(calls) for calls in by_rank.values() if calls), default=1)
    end = max(last.values(), default=0)
    for seq in range(start, end + 1):
        present = {r: calls[seq] for r, calls in by_rank.items() if seq in calls}
        signatures: dict[object, list[int]] = {}
        for rank, call in sorted(present.items()):
            signatures.setdefault(call.signature(), []).append(rank)
        if len(signatures) > 1:
            sides = [Side(tuple(ranks), present[ranks[0]], by_rank[ranks[0]][last[ranks[0]]])
                     for ranks in signatures.values()]
            return Comparison(key, "mismatch", seq, _biggest_first(sides))
        if len(present) < len(by_rank):
            arrived = tuple(sorted(present))
            absent = tuple(sorted(set(by_rank) - set(present)))
            sides = [Side(arrived, present[arrived[0]], by_rank[arrived[0]][last[arrived[0]]])]
            for tail, ranks in _by_last(absent, last).items():
                sides.append(Side(ranks, None, by_rank[ranks[0]].get(tail)))
            return Comparison(key, "uneven", seq, tuple(sides))
    return _states(key, end, by_rank)


def _states(key: str, end: int, by_rank: dict[int, dict[int, Call]]) -> Comparison:
    """Every rank made the same calls. NCCL's states tell a call some rank never completed."""
    lasts = {r: calls[end] for r, calls in by_rank.items() if end in calls}
    meaningful = any(c.backend != "gloo" and c.state in ("started", "completed") for c in lasts.values())
    waiting = tuple(sorted(r for r, c in lasts.items() if c.state != "completed"))
    if meaningful and waiting:
        rank = waiting[0]
        return Comparison(key, "stuck", end, (Side(waiting, lasts[rank], lasts[rank]),))
    any_rank = min(lasts) if lasts else None
    call = lasts[any_rank] if any_rank is not None else None
    return Comparison(key, "healthy", end, (Side(tuple(sorted(by_rank)), call, call),))


def _members(key: str, dumps: list[Dump]) -> set[int]:
    """The ranks of the group that wrote a dump: those the group's configuration lists, or, when
    no dump lists them, every rank that recorded a call in it."""
    listed = {r for d in dumps for r in (d.groups[key].ranks if key in d.groups else ())}
    have = {d.rank for d in dumps}
    if listed:
        return listed & have
    return {d.rank for d in dumps if key in d.calls}


def _by_last(ranks: tuple[int, ...], last: dict[int, int]) -> dict[int, tuple[int, ...]]:
    groups: dict[int, list[int]] = {}
    for r in ranks:
        groups.setdefault(last[r], []).append(r)
    return {k: tuple(v) for k, v in sorted(groups.items())}


def _biggest_first(sides: list[Side]) -> tuple[Side, ...]:
    return tuple(sorted(sides, key=lambda s: (-len(s.ranks), s.ranks[0])))


def expected_ranks(dumps: list[Dump]) -> tuple[tuple[int, ...], bool]:
    """Every rank the job had, as the default group's configuration lists it (else the ranks
    seen), and whether a configuration listed them (gloo's dumps may list none)."""
    listed = {r for d in dumps for r in (d.groups["0"].ranks if "0" in d.groups else ())}
    return tuple(sorted(listed | {d.rank for d in dumps})), bool(listed)


def root_first(comparisons: list[Comparison]) -> list[Comparison]:
    """Divergences that explain others first: ranks that never arrived in one group because they
    wait in another group's divergence are its consequence, not its cause."""
    waiting = {c.group: set(c.sides[0].ranks) for c in comparisons if c.kind == "uneven"}

    def consequence(c: Comparison) -> bool:
        absent = {r for s in c.sides[1:] for r in s.ranks}
        return c.kind == "uneven" and any(absent <= w for g, w in waiting.items() if g != c.group)

    return sorted(comparisons, key=consequence)
