"""Why a job hung or broke, from what each rank was doing: the first collective the ranks entered
differently, uneven work (a longer shard, a rank that left the training loop), or — when neither
explains it — where each rank waits. Torch-free: the deciding rank's watchdog runs it on the states
the ranks published, the launcher on the ranks' live files after a crash.

The order of the explanations is the order of causes: uneven work makes the collectives differ,
so it leads; a mismatch inside the loop is the user's own deadlock; a plain hang comes last.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from ddpcheck.catalog import code_named
from ddpcheck.run.calls import WORLD, Call, CallLog, Mismatch, Side, first_mismatch, ranks_text, short, source_of
from ddpcheck.run.source_loops import Guard, Loop, enclosing_loop, rank_guard

# The runtime checks a diagnosis reports, by name (their codes are on their classes in run/checks/).
MISMATCH, UNEVEN, HANG = "collective-mismatch", "uneven-work", "collective-hang"


@dataclass(frozen=True)
class PassInfo:
    """One data loader pass on one rank."""

    loader: int
    number: int
    site: str | None
    batches: int
    ended: bool  # the loader ran out; False: still in it, or the rank left it
    steps: int = 0
    forwards: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return self.loader, self.number

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PassInfo":
        return cls(int(data.get("loader", 0)), int(data.get("pass", 0)), data.get("site"),
                   int(data.get("batches", 0)), bool(data.get("ended")), int(data.get("steps", 0)),
                   int(data.get("forwards", 0)))


@dataclass(frozen=True)
class RankState:
    """What one rank was doing when the job stopped making progress (or broke)."""

    rank: int
    logs: Mapping[str, CallLog]
    steps: int = 0
    forwards: int = 0
    passes: tuple[PassInfo, ...] = ()  # oldest first; the last may be open
    ours: str | None = None  # ddpcheck's own traffic it waits in
    place: str | None = None  # the known place in torch its stack is in
    frames: tuple[str, ...] = ()  # innermost user frames, 'path:line in function'
    busy: bool = False
    answered: bool = True
    progress_at: float = 0.0  # wall-clock time of its last progress (0: unknown)
    in_join: bool = False  # inside DDP's Join() context: the sequences differ by design

    @property
    def world(self) -> CallLog:
        return self.logs.get(WORLD) or CallLog(0, ())

    @property
    def current(self) -> Call | None:
        for log in self.logs.values():
            if log.current is not None:
                return log.current
        return None

    @classmethod
    def from_json(cls, rank: int, data: Mapping[str, Any]) -> "RankState":
        logs = {name: CallLog.from_json(log) for name, log in (data.get("logs") or {}).items()}
        return cls(rank, logs, int(data.get("steps", 0)), int(data.get("forwards", 0)),
                   tuple(PassInfo.from_json(p) for p in data.get("passes") or ()),
                   data.get("ours"), data.get("place"), tuple(data.get("frames") or ()),
                   bool(data.get("busy")), True, float(data.get("at", 0.0)), bool(data.get("in_join")))


@dataclass(frozen=True)
class Diagnosis:
    code: str
    message: str
    ranks: tuple[int, ...]  # the ranks that went their own way
    site: str | None  # file:line to point at
    details: dict[str, Any] = field(default_factory=dict)


def diagnose(states: Mapping[int, RankState], world: int, *, hung_s: float | None = None,
             ended: frozenset[int] = frozenset()) -> Diagnosis | None:
    """The explanation, most causal first. With `hung_s` (the job made no progress for that long)
    there is always one; without (the job crashed), only a mismatch or uneven work. `ended`: the
    ranks that finished the script normally (known after the job)."""
    present = {r: s for r, s in states.items() if s.answered}
    if any(s.in_join for s in present.values()):  # Join shadows the collectives: no comparison
        return _plain_hang(states, world, hung_s) if hung_s is not None else None
    mismatch = _mismatch(present)
    uneven = uneven_passes(present)
    suffix = f"; the job hung (no progress for {hung_s:g} s) and ddpcheck stopped it" if hung_s is not None else ""
    details: dict[str, Any] = {}
    if mismatch is not None:
        details["mismatch"] = {"call": mismatch.seq, "group": mismatch.group,
                               "sides": [{"ranks": list(s.ranks), "call": s.call.what(),
                                          "sites": sorted({c.site or "" for c in s.calls})} for s in mismatch.sides],
                               "missing": list(mismatch.missing)}
    if uneven is not None:
        details["uneven"] = uneven.to_json()
        then = f"; so {mismatch.message()}" if mismatch is not None else ""
        return Diagnosis(code_named(UNEVEN), uneven.message() + then + suffix, uneven.odd, uneven.site, details)
    left = left_loop(present, mismatch) if mismatch is not None else None
    if left is not None and mismatch is not None:
        details["left_loop"] = {"ranks": list(left.ranks), "loop": [left.loop.start, left.loop.end],
                                "exits": list(left.loop.exits)}
        return Diagnosis(code_named(UNEVEN), left.message(mismatch) + suffix, left.ranks, left.site, details)
    if mismatch is not None:
        odd = mismatch.odd_ranks
        absent = [present[r] for r in mismatch.missing if r in present]
        if len(mismatch.sides) == 1 and absent and all(a.ours for a in absent):
            # They left the others' collective behind for ddpcheck's exchange: one more optimizer step.
            steps = sorted({a.steps for a in absent})
            others = sorted({present[r].steps for r in mismatch.sides[0].ranks if r in present})
            verb = "waits" if len(mismatch.missing) == 1 else "wait"
            text = (f"{ranks_text(mismatch.missing)} ran optimizer step {steps[-1]} (the others have run "
                    f"{others[0] if others else '?'}) and {verb} in ddpcheck's check exchange: {mismatch.message()}")
            return Diagnosis(code_named(UNEVEN), text + suffix, mismatch.missing, _mismatch_site(mismatch), details)
        alone = _alone(mismatch, ended)
        if alone is not None:
            side, why = alone
            return Diagnosis(code_named(MISMATCH), mismatch.message() + why + suffix, side.ranks, side.call.site, details)
        if len(mismatch.sides) == 1 and absent and all(a.current is None for a in absent):
            if hung_s is not None:  # they are outside any collective (idle): a plain hang says where
                return _plain_hang(states, world, hung_s)
            return None
        return Diagnosis(code_named(MISMATCH), mismatch.message() + suffix, odd, _mismatch_site(mismatch), details)
    if hung_s is None:
        return None
    return _plain_hang(states, world, hung_s)


def guard_of(side: Side) -> Guard | None:
    """The `if` on the rank that every call of this side is under, if any."""
    guards = []
    for call in side.calls:
        path, _, line = (call.site or "").rpartition(":")
        guard = rank_guard(path, int(line)) if path and line.isdigit() else None
        if guard is None:
            return None
        guards.append(guard)
    return guards[0] if guards else None


def _alone(mismatch: Mismatch, ended: frozenset[int]) -> tuple[Side, str] | None:
    """The side that entered a collective the others never make: a call under an `if` on the
    rank (`if rank == 0: dist.all_reduce(t)`), also when the others could not meet it because
    they had finished the script. Returns that side and what to add to the message."""
    if len(mismatch.sides) == 1 and mismatch.missing:
        side = mismatch.sides[0]
        guard = guard_of(side)
        if guard is None:  # the others left early (sys.exit on one rank): the crash report says so
            return None
        why = _under(side, guard)
        if ended and all(r in ended for r in mismatch.missing):
            verb = "had" if len(mismatch.missing) == 1 else "had all"
            why += f"; {ranks_text(mismatch.missing)} {verb} finished the script"
        return side, why
    guarded = [(side, guard) for side in mismatch.sides if (guard := guard_of(side)) is not None]
    if len(guarded) == 1 and len(mismatch.sides) == 2:
        side, guard = guarded[0]
        if len(side.ranks) < len(mismatch.sides[0].ranks):
            return None  # the fewer ranks are the odd ones already
        return side, _under(side, guard)
    return None


def _under(side: Side, guard: Guard) -> str:
    test = guard.test if len(guard.test) <= 48 else "..."
    return (f"; {ranks_text(side.ranks)} {'makes' if len(side.ranks) == 1 else 'make'} that call only under "
            f"`if {test}:` at {short(f'{guard.path}:{guard.line}')}, which the other ranks skip")


def _mismatch_site(mismatch: Mismatch) -> str | None:
    """The line of the ranks that went their own way (else the others')."""
    site = next((c.site for s in mismatch.sides[1:] for c in s.calls if c.site), None)
    if site is None and mismatch.sides:
        site = mismatch.sides[0].call.site
    return site


def _mismatch(states: Mapping[int, RankState]) -> Mismatch | None:
    groups = sorted({g for s in states.values() for g in s.logs}, key=lambda g: (g != WORLD, g))
    for group in groups or [WORLD]:
        if group == WORLD:
            logs = {r: s.world for r, s in states.items()}
        else:
            logs = {r: s.logs[group] for r, s in states.items() if group in s.logs}
        found = first_mismatch(logs, group)
        if found is not None:
            return found
    return None


# --- uneven work -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnevenPass:
    loader: int
    number: int
    site: str | None
    batches: Mapping[int, int]
    ended: Mapping[int, bool]
    steps: Mapping[int, int]

    @property
    def groups(self) -> list[tuple[int, tuple[int, ...]]]:
        by: dict[int, list[int]] = {}
        for rank, n in sorted(self.batches.items()):
            by.setdefault(n, []).append(rank)
        return sorted(((n, tuple(rs)) for n, rs in by.items()), key=lambda g: (-len(g[1]), g[1][0]))

    @property
    def odd(self) -> tuple[int, ...]:
        return tuple(sorted(r for _, rs in self.groups[1:] for r in rs))

    def message(self) -> str:
        where = f" from the DataLoader at {short(self.site)}" if self.site else ""
        parts = []
        for n, ranks in sorted(self.groups, key=lambda g: (len(g[1]), g[1])):
            verb = "drew" if all(self.ended[r] for r in ranks) else "had drawn"
            steps = sorted({self.steps[r] for r in ranks})
            tail = f" ({steps[0]} optimizer step{'s' if steps[0] != 1 else ''})" if len(steps) == 1 else ""
            parts.append(f"{ranks_text(ranks)} {verb} {n} batch{'es' if n != 1 else ''}{tail}")
        return f"uneven work in epoch {self.number}{where}: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"loader": self.loader, "epoch": self.number, "site": self.site,
                "batches": {str(r): n for r, n in self.batches.items()},
                "ended": {str(r): e for r, e in self.ended.items()},
                "steps": {str(r): n for r, n in self.steps.items()}}


def uneven_passes(states: Mapping[int, RankState]) -> UnevenPass | None:
    """The first data loader pass that some ranks finished with fewer batches than others drew in it.
    A rank still inside a pass with fewer batches is only behind: that is no evidence."""
    if len(states) < 2:
        return None
    by_key: dict[tuple[int, int], dict[int, PassInfo]] = {}
    for rank, state in states.items():
        for p in state.passes:
            by_key.setdefault(p.key, {})[rank] = p
    for key in sorted(by_key):
        passes = by_key[key]
        if len(passes) < len(states):
            continue
        counts = {r: p.batches for r, p in passes.items()}
        if len(set(counts.values())) < 2:
            continue
        finished = [p.batches for p in passes.values() if p.ended]
        if not finished or max(counts.values()) <= min(finished):
            continue
        first = passes[min(passes)]
        return UnevenPass(key[0], key[1], first.site, counts, {r: p.ended for r, p in passes.items()},
                          {r: p.steps for r, p in passes.items()})
    return None


@dataclass(frozen=True)
class LeftLoop:
    ranks: tuple[int, ...]  # the ranks that left the loop
    stayed: tuple[int, ...]
    loop: Loop
    site: str | None  # where they left (the one exit of the loop), else their next collective
    steps: Mapping[int, int]

    def message(self, mismatch: Mismatch) -> str:
        steps = sorted({self.steps[r] for r in self.ranks})
        after = f" after {steps[0]} optimizer step{'s' if steps[0] != 1 else ''}" if len(steps) == 1 else ""
        how = ""
        if len(self.loop.exits) == 1 and self.site:
            code = source_of(self.site) or ""
            word = code.split()[0] if code.split() else ""
            how = f" (the `{word}` at {short(self.site)})" if word in ("break", "return") else ""
        loop = f"{os.path.basename(self.loop.path)}:{self.loop.start}"
        return (f"{ranks_text(self.ranks)} left the training loop at {loop}{after}{how} while "
                f"{ranks_text(self.stayed)} went on: {mismatch.message()}")


def left_loop(states: Mapping[int, RankState], mismatch: Mismatch) -> LeftLoop | None:
    """Ranks whose next collective lies after the loop the other ranks' collective is in: they
    left the training loop (early stopping, a shorter shard) while the others still train."""
    if len(mismatch.sides) != 2:
        return None
    for inside, outside in (mismatch.sides, mismatch.sides[::-1]):
        site = inside.call.site
        if not site:
            continue
        path, _, line = site.rpartition(":")
        loop = enclosing_loop(path, int(line)) if line.isdigit() else None
        if loop is None or guard_of(outside) is not None:
            continue  # a call under `if rank == 0:` is an extra collective, not a way out of the loop
        lines = [_line_in(path, c, states.get(r)) for r, c in zip(outside.ranks, outside.calls)]
        if lines and all(n is not None and n > loop.end for n in lines):
            exit_site = f"{path}:{loop.exits[0]}" if len(loop.exits) == 1 else outside.call.site
            return LeftLoop(outside.ranks, inside.ranks, loop, exit_site,
                            {r: states[r].steps if r in states else c.step for r, c in zip(outside.ranks, outside.calls)})
    return None


def _line_in(path: str, call: Call, state: RankState | None) -> int | None:
    """The line of `path` the rank is at: its call's site, else one of its user frames there."""
    candidates = [call.site] if call.site else []
    candidates += [f.rpartition(" in ")[0] for f in (state.frames if state else ())]
    for site in candidates:
        file, _, line = site.rpartition(":")
        if file == path and line.isdigit():
            return int(line)
    return None


# --- a hang nothing above explains ----------------------------------------------------------------
def activity(state: RankState) -> str:
    """'in all_reduce float32[4] at train.py:57 (after step 3) (call #7)', 'idle at train.py:40', ..."""
    if not state.answered:
        return "silent (dead, or stuck outside Python: no answer from its watchdog)"
    current = state.current
    if state.ours:
        return f"in {state.ours}"
    if current is not None:
        return f"in {current.describe()} (call #{current.seq})"
    frame = _short_frame(state.frames[0]) if state.frames else None
    if state.place:
        return f"in {state.place}" + (f" at {frame}" if frame else "")
    last = state.world.at(state.world.entered)
    tail = f"; its last collective was call #{last.seq}, {last.describe()}" if last else ""
    return "not in a collective" + (f": idle at {frame}" if frame else "") + tail


def _short_frame(frame: str) -> str:
    site, _, function = frame.partition(" in ")
    return short(site) + (f" in {function}" if function else "")


def _plain_hang(states: Mapping[int, RankState], world: int, hung_s: float) -> Diagnosis:
    groups: dict[str, list[int]] = {}
    for rank in range(world):
        state = states.get(rank) or RankState(rank, {}, answered=False)
        groups.setdefault(activity(state), []).append(rank)
    parts = [f"{ranks_text(rs)} {'is' if len(rs) == 1 else 'are'} {text}" for text, rs in groups.items()]
    currents = {r: s.current for r, s in states.items() if s.answered and s.current is not None}
    outside = sorted(r for r, s in states.items() if s.answered and s.current is None and not s.ours)
    silent = [r for r in range(world) if r not in states or not states[r].answered]
    reasons = []
    if silent and len(silent) < world:
        reasons.append(f"{ranks_text(silent)} never answered (stuck in native code that holds the GIL, "
                       "or dead) while the others wait")
    if outside and currents:
        reasons.append(f"{ranks_text(outside)} never joined the collective the others wait in")
    if not reasons:
        reasons.append("every rank waits in the same collective: a rank outside Python or the network is stuck"
                       if len(groups) == 1 and currents else "the ranks wait in different places")
    why = "; ".join(reasons)
    odd = sorted(set(silent) | set(outside if currents else ())) or (
        min(groups.values(), key=lambda rs: (len(rs), rs)) if len(groups) > 1 else [])
    site = None
    for r in odd or sorted(currents):
        call = currents.get(r)
        if call is not None and call.site:
            site = call.site
            break
        known = states.get(r)
        if known is not None and known.frames:
            site = known.frames[0].rpartition(" in ")[0]
            break
    message = f"no progress for {hung_s:g} s: " + "; ".join(parts) + f" — {why}"
    return Diagnosis(code_named(HANG), message, tuple(sorted(odd)), site, {})


# --- after the job: what the ranks' files say ------------------------------------------------------
SECTION = "collectives"  # the rank record's part written by the collective ledger


def states_from_files(record_dir: str, records: list[dict[str, Any]]) -> dict[int, RankState]:
    """Each rank's last state from its live file (written up to the moment it died), with the
    data loader passes its record kept; ranks without a live file are left out."""
    from ddpcheck.run import live

    by_rank = {int(r.get("rank", -1)): r for r in records}
    ranks = set(by_rank)
    try:
        names = os.listdir(record_dir)
    except OSError:
        names = []
    for name in names:
        if name.startswith("live-rank-") and name.endswith(".bin") and name[10:-4].isdigit():
            ranks.add(int(name[10:-4]))
    out: dict[int, RankState] = {}
    for rank in sorted(r for r in ranks if r >= 0):
        data = live.read(live.path_for(record_dir, rank))
        if data is None:
            continue
        section = (by_rank.get(rank) or {}).get("probes", {}).get(SECTION, {})
        passes = {(p.loader, p.number): p for p in (PassInfo.from_json(p) for p in section.get("passes", ()))}
        current = data.get("pass")
        if isinstance(current, dict) and data["pass_serial"]:
            info = PassInfo(int(current.get("loader", 0)), int(current.get("pass", 0)), current.get("site"),
                            data["pass_batches"], bool(data["pass_ended"]),
                            data["steps"] - data["pass_steps0"], data["forwards"] - data["pass_forwards0"])
            passes[info.key] = info
        out[rank] = RankState(rank, {WORLD: data["log"]}, data["steps"], data["forwards"],
                              tuple(passes[k] for k in sorted(passes)),
                              "ddpcheck's check exchange" if data["ours"] else None,
                              progress_at=data["progress_ms"] / 1000.0)
    return out
