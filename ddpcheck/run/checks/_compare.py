"""What the step-wise probes (gradients, parameters, buffers, inputs) share: a bounded log of one
digest per checked step in each rank, and the comparison of those logs across ranks. The
judging half is torch-free.

A rank's log never grows with the length of the run. It keeps

- the first KEEP checked steps' entries (`steps`), for comparison after the job;
- the entries of the first MAX_DETAIL steps at which the live exchange saw the ranks differ
  (`differ`), with the per-tensor fingerprints of those steps (`detail`) to name the tensors;
- `count` and a rolling digest of every checked step (`rolling`), so that a difference after the
  first KEEP steps is still seen when no live exchange ran.

Without a live exchange (one process per node without ddpcheck's group, or inside DDP's Join())
the per-tensor fingerprints of the first MAX_DETAIL_OFFLINE checked steps are kept instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.run.calls import ranks_text
from ddpcheck.run.records import Record, section

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

KEEP = 32  # checked steps whose digests every rank keeps
MAX_DETAIL = 3  # steps whose per-tensor fingerprints a rank keeps once ranks are seen to differ
MAX_DETAIL_OFFLINE = 8  # ... or, without a live exchange, the first checked steps
_MASK = (1 << 64) - 1
NONE_PAIR = [-1, -1]  # the fingerprint of a missing tensor (a None gradient)


class StepLog:
    """One probe's per-step digests in one rank (see the module docstring)."""

    def __init__(self, session: Session, part: dict[str, Any], slot: int, key: str = "steps") -> None:
        self.session, self.part, self.slot, self.key = session, part, slot, key
        self.pending: dict[int, tuple[list[Any], dict[str, Any]]] = {}  # step -> held until exchanged
        part[key] = {"steps": [], "count": 0, "rolling": 0, "differ": [], "detail": [], "differing": 0}

    @property
    def log(self) -> dict[str, Any]:
        log: dict[str, Any] = self.part[self.key]
        return log

    def add(self, entry: list[Any], names: list[str] | None = None,
            fingerprints: list[tuple[int, int]] | None = None) -> None:
        """`entry` = [step, digest, ...]; `names`/`fingerprints`: the per-tensor detail."""
        log = self.log
        log["count"] += 1
        log["rolling"] = (log["rolling"] * 0x100000001B3 + (entry[0] << 32) + (entry[1] & _MASK)) & _MASK
        if len(log["steps"]) < KEEP:
            log["steps"].append(entry)
        detail = {"step": entry[0], "names": names or [], "fingerprints": [list(f) for f in fingerprints or []]}
        session = self.session
        live = session.group is not None and session.exchange_ok and session.world_size > 1
        if not live:
            if fingerprints is not None and len(log["detail"]) < MAX_DETAIL_OFFLINE:
                log["detail"].append(detail)
        else:  # held until the exchange of this step finishes, at the next checked step
            self.pending[entry[0]] = (entry, detail)
            while len(self.pending) > 2:
                del self.pending[min(self.pending)]

    def exchanged(self, step: int, rows: list[list[int]]) -> bool:
        """Keep the held entry (and its detail) if the ranks differ in this slot; True if they do."""
        differ = len({row[self.slot] for row in rows}) > 1
        log = self.log
        log["differing"] += differ
        held = self.pending.pop(step, None)
        if differ and held is not None and len(log["differ"]) < MAX_DETAIL:
            entry, detail = held
            log["differ"].append(entry)
            if detail["names"] or detail["fingerprints"]:
                log["detail"].append(detail)
        return differ


# --- judging, in the launcher ------------------------------------------------------------------

def logs_by_rank(records: list[Record], probe: str, key: str = "steps") -> dict[int, dict[str, Any]]:
    """rank -> that rank's log of `probe` (ranks without one are left out), up to the step where
    the ranks' step counts stopped pairing up (`misaligned_step`)."""
    out = {}
    for r in records:
        log = section(r, probe).get(key)
        if isinstance(log, dict):
            out[int(r["rank"])] = log
    cut = misaligned_step(records)
    return out if cut is None else {rank: _before(log, cut) for rank, log in out.items()}


def misaligned_step(records: list[Record]) -> int | None:
    """The first checked step that the ranks took at different lines of the script (an optimizer
    some ranks step alone shifts their step count), or None."""
    steps = [int(m["step"]) for r in records if isinstance(m := r.get("steps_misaligned"), dict)]
    return min(steps) if steps else None


def misaligned(records: list[Record]) -> str:
    """What a row says when the ranks' steps stopped pairing up, or ""."""
    cut = misaligned_step(records)
    if cut is None:
        return ""
    sites = {int(r["rank"]): r["steps_misaligned"].get("site") for r in records
             if isinstance(r.get("steps_misaligned"), dict) and r["steps_misaligned"].get("site")}
    said = "; ".join(f"rank {rank} at {site}" for rank, site in sorted(sites.items()))
    return (f"compared only before optimizer step {cut}: there the ranks stepped at different lines"
            f"{' (' + said + ')' if said else ''}, so an optimizer some ranks step alone makes the "
            "same step number mean different points of training")


def _before(log: dict[str, Any], cut: int) -> dict[str, Any]:
    kept = [e for e in log.get("steps", []) if int(e[0]) < cut]
    return {**log, "steps": kept, "differ": [e for e in log.get("differ", []) if int(e[0]) < cut],
            "detail": [d for d in log.get("detail", []) if int(d.get("step", 0)) < cut],
            "count": len(kept), "rolling": 0, "differing": 0}


def entries(log: dict[str, Any]) -> dict[int, list[Any]]:
    """step -> entry, from the kept steps and the steps seen to differ."""
    return {int(e[0]): e for e in [*log.get("steps", []), *log.get("differ", [])]}


def steps_by_rank(logs: dict[int, dict[str, Any]]) -> dict[int, dict[int, int]]:
    """rank -> {step: digest}."""
    return {rank: {s: int(e[1]) for s, e in entries(log).items()} for rank, log in logs.items()}


def first_mismatch(logs: dict[int, dict[str, Any]]) -> tuple[int | None, dict[int, int], int, int]:
    """(first differing step, {rank: digest} there, differing steps seen, compared steps).

    A difference seen only in the rolling digests (after the kept steps, with no live exchange)
    is reported at step -1: "after the first KEEP checked steps"."""
    per_rank = steps_by_rank(logs)
    if len(per_rank) < 2:
        return None, {}, 0, 0
    common = sorted(set.intersection(*(set(v) for v in per_rank.values())))
    first, at, bad = None, {}, 0
    for step in common:
        values = {r: v[step] for r, v in per_rank.items()}
        if len(set(values.values())) > 1:
            bad += 1
            if first is None:
                first, at = step, values
    bad = max([bad, *(log.get("differing", 0) for log in logs.values())])
    counts = {log.get("count", 0) for log in logs.values()}
    compared = int(max(counts)) if len(counts) == 1 else len(common)
    same_steps = len({frozenset(v) for v in per_rank.values()}) == 1  # (not so after DDP's Join())
    if first is None and len(counts) == 1 and same_steps:
        rolling = {r: int(log.get("rolling", 0)) for r, log in logs.items()}
        if len(set(rolling.values())) > 1:
            return -1, rolling, 1, compared
    return first, at, bad, compared


def realigned(records: list[Record]) -> str:
    """What a passing row adds when DDP's Join() made the ranks take different numbers of steps,
    or an optimizer that some ranks step alone shifted their step counts."""
    said = ""
    if any(r.get("steps_realigned") for r in records):
        said = ("; at the steps the ranks took together (a step that only some ranks took inside "
                "DDP's Join() is compared with nothing)")
    cut = misaligned(records)
    return said + (f"; {cut}" if cut else "")


def not_last_word(records: list[Record]) -> tuple[int, ...]:
    """Ranks whose record is not what they had done when they ended: killed (SIGKILL, or their
    stop handler never ran) after their last write, which can be a second and many steps old. A
    rank that finished, was stopped by SIGTERM (it writes then) or hung (written at the verdict)
    left its counts whole."""
    return tuple(sorted(int(r.get("rank", -1)) for r in records
                        if r.get("status") not in ("finished", "hung") and not r.get("stopped")))


def at_least(records: list[Record]) -> str:
    """What a passing row's counts add when some rank's record is not its last word: a count that
    takes those ranks' records is a lower bound."""
    stale = not_last_word(records)
    if not stale:
        return ""
    return (f"; counts are at least these: {ranks_text(stale)} ended without writing "
            f"{'its' if len(stale) == 1 else 'their'} last record")


def differing_tensors(logs: dict[int, dict[str, Any]], step: int) -> list[tuple[str, dict[int, Any]]] | None:
    """[(name, {rank: fingerprint})] for the tensors whose fingerprints differ at `step` (if kept)."""
    per_rank = {}
    for rank, log in logs.items():
        for d in log.get("detail", []):
            if d["step"] == step:
                per_rank[rank] = d
    if len(per_rank) < 2:
        return None
    names = next(iter(per_rank.values()))["names"]
    out = []
    for i, name in enumerate(names):
        values = {rank: tuple(d["fingerprints"][i]) for rank, d in per_rank.items() if i < len(d["fingerprints"])}
        if len(set(values.values())) > 1:
            out.append((name, values))
    return out


def describe_tensor(name: str, values: dict[int, Any]) -> str:
    missing = tuple(r for r, v in values.items() if list(v) == NONE_PAIR)
    if missing and len(missing) < len(values):
        return f"{name} (None on rank{'s' if len(missing) > 1 else ''} {','.join(map(str, missing))})"
    return name


def where(step: int) -> str:
    return f"a checked step after the first {KEEP}" if step == -1 else f"optimizer step {step}"
