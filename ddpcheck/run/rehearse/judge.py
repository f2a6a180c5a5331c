"""From the rehearsed ranks of each world size to problems, each with the first world size it
appears at. Torch-free.

A problem is one fault in one place (a loader, a line), found at one or more world sizes: the table
shows it per size ("ok" below its first), and the finding is told once, at the first size, with
the others named. The codes and pages are in ddpcheck/run/checks/rehearsal.py.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.catalog import code_named
from ddpcheck.findings import Finding
from ddpcheck.run.calls import CallLog, first_mismatch, short
from ddpcheck.run.rehearse.plan import SamplerShards, batches, rank_ranges, strided_shard
from ddpcheck.run.rehearse.runner import RankRun

# The checks a rehearsal reports, by name; their codes are on their classes (run/checks/rehearsal.py).
# A device index past its node is the same fault a --nodes run finds (device-not-on-node), found
# here by placing each rehearsed rank on its node.
UNEVEN, COLLECTIVES, FAILS, EMPTY_EVAL, LR, DEVICE, BLOCKED = REHEARSAL_CODES = tuple(code_named(name) for name in (
    "uneven-shard-at-scale", "collectives-differ-at-scale", "fails-at-world-size", "empty-eval-shard-at-scale",
    "learning-rate-at-scale", "device-not-on-node", "rank-blocked-at-scale"))
LR_FACTOR = 32.0  # growth of the learning rate over the one-rank value that is reported
_DEVICE_ERRORS = ("invalid device ordinal", "CUDA error: invalid device")


@dataclass
class Problem:
    code: str
    key: str  # what makes two world sizes' findings the same problem
    cells: dict[int, str] = field(default_factory=dict)  # world size -> what happened there
    messages: dict[int, str] = field(default_factory=dict)
    ranks: dict[int, tuple[int, ...]] = field(default_factory=dict)
    path: str | None = None
    line: int | None = None
    details: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def first(self) -> int:
        return min(self.cells)


@dataclass
class Verdict:
    sizes: list[int]
    nproc: int
    problems: list[Problem]
    facts: dict[int, dict[str, Any]]  # world size -> ranks run, global batch, lr, time, memory

    def findings(self) -> list[Finding]:
        from ddpcheck.run import registry

        classes = registry.checks()
        out = []
        for p in sorted(self.problems, key=lambda p: (p.first, p.code)):
            cls = classes[p.code]
            first = p.first
            ok = [w for w in self.sizes if w < first]
            later = [w for w in sorted(p.cells) if w != first]
            head = (f"ok at {', '.join(map(str, ok))}; " if ok else "") + f"at {first} ranks: "
            tail = f" (also at {', '.join(map(str, later))})" if later else ""
            out.append(Finding(
                code=p.code, name=cls.name, message=head + p.messages[first] + tail,
                severity=cls.severity, path=p.path, line=p.line, hint=cls.fix_hint(),
                ranks=p.ranks.get(first, ()),
                details={"world_sizes": sorted(p.cells), "first_world_size": first,
                         **p.details.get(first, {})}))
        return out


def judge(runs: dict[int, list[RankRun]], sizes: list[int], nproc: int) -> Verdict:
    problems: dict[tuple[str, str], Problem] = {}
    baseline = runs.get(1, [])
    base = baseline[0] if baseline else None

    def add(code: str, key: str, world: int, cell: str, message: str, ranks: tuple[int, ...] = (),
            site: str | None = None, **details: Any) -> None:
        p = problems.setdefault((code, key), Problem(code, key))
        if world in p.cells:
            return
        p.cells[world] = cell
        p.messages[world] = message
        p.ranks[world] = ranks
        p.details[world] = details
        if site and p.path is None:
            path, _, line = site.rpartition(":")
            p.path, p.line = os.path.relpath(path), int(line) if line.isdigit() else None

    facts: dict[int, dict[str, Any]] = {}
    for world in sizes:
        ranks = runs.get(world, [])
        facts[world] = _facts(ranks, world)
        _shards(ranks, world, add, base)
        _crashes(ranks, world, base, add, problems)
        _collectives(ranks, world, add, problems)
        _learning_rate(ranks, world, base, add)
    return Verdict(sizes, nproc, list(problems.values()), facts)


# --- what happened to each rank ---------------------------------------------------------------
def _site(run: RankRun) -> str | None:
    crash = run.crash or {}
    if crash.get("path") and crash.get("line"):
        return f"{crash['path']}:{crash['line']}"
    return None


def _crashes(ranks: list[RankRun], world: int, base: RankRun | None, add: Any,
             problems: dict[tuple[str, str], Problem]) -> None:
    by_site: dict[tuple[str, str], list[RankRun]] = {}
    waiting: dict[str, list[RankRun]] = {}
    for run in ranks:
        if run.status == "blocked":
            waiting.setdefault(run.blocked_at or "?", []).append(run)
        elif run.status == "crashed" and run.crash:
            by_site.setdefault((_site(run) or "?", run.crash.get("type", "")), []).append(run)
    for at, blocked in waiting.items():
        ids = tuple(r.rank for r in blocked)
        where = short(at) if at != "?" else "a place outside your code"
        limit = blocked[0].rehearsal.get("limits", {}).get("time_limit")
        during = f"in {float(limit):.0f} s" if limit else "within its time limit"
        add(BLOCKED, at, world, f"{_ranks_word(ids)} blocked",
            f"{_ranks_word(ids)} made no progress {during}; {'it waits' if len(ids) == 1 else 'they wait'} at "
            f"{where}. On the cluster {'it' if len(ids) == 1 else 'they'} would wait there the same way",
            ids, at if at != "?" else None)
    for (site, kind), crashed in by_site.items():
        first = crashed[0]
        crash = first.crash or {}
        error = f"{kind}: {crash.get('message', '')}".rstrip(": ")
        ids = tuple(r.rank for r in crashed)
        where = short(site) if site != "?" else "a line outside your code"
        who = _ranks_word(ids)
        if any(m in crash.get("message", "") for m in _DEVICE_ERRORS):
            placed = ", ".join(f"{r.rank} (node {r.node}, local rank {r.local_rank})" for r in crashed)
            add(DEVICE, site, world, f"{who}: invalid device",
                f"rank{'s' if len(ids) > 1 else ''} {placed} asked for a CUDA device its node of "
                f"{first.rehearsal.get('gpus_per_node') or '?'} GPUs does not have, at {where}: {error}. "
                "Take the device from LOCAL_RANK, not from the global rank", ids, site if site != "?" else None)
            continue
        cause = _explained(problems, world, ids)
        if cause is not None:  # ranks without data that then divide by their batch count
            cause.messages[world] += f". {who} then fail{'s' if len(ids) == 1 else ''} at {where} with {error}"
            cause.details[world]["crash"] = {"ranks": list(ids), "site": site, "error": error}
            continue
        also = base is not None and base.status == "crashed" and _site(base) == site
        add(FAILS, site, world, f"{who}: {kind}",
            f"{who} fail{'s' if len(ids) == 1 else ''} at {where} with {error}"
            + (" (it fails at 1 rank too)" if also else
               "; the formula there does not hold at this world size (check what it divides by or asserts)"),
            ids, site if site != "?" else None)
    if base is not None and base.status != "crashed" and int(base.rehearsal.get("steps") or 0) > 0:
        idle = [r for r in ranks if r.status in ("stopped", "finished") and not int(r.rehearsal.get("steps") or 0)]
        if idle:
            ids = tuple(r.rank for r in idle)
            add(FAILS, "no-steps", world, f"{_ranks_word(ids)}: no optimizer step",
                f"{_ranks_word(ids)} never took an optimizer step (one rank took "
                f"{base.rehearsal.get('steps')}){_why_no_step(base, idle[0])}", ids, _training_site(base))


def _training_loader(run: RankRun) -> dict[str, Any] | None:
    return next((i for i in run.rehearsal.get("loaders", []) if _trains(i)), None)


def _training_site(base: RankRun) -> str | None:
    info = _training_loader(base)
    return None if info is None else info.get("site")


def _why_no_step(base: RankRun, idle: RankRun) -> str:
    """What the training loader gives the idle rank, against how many batches a step took at 1 rank."""
    trained = _training_loader(base)
    if trained is None:
        return ": a batch or accumulation count is 0 at this world size"
    here = next((i for i in idle.rehearsal.get("loaders", []) if i.get("loader") == trained.get("loader")), None)
    passes = [p for p in trained.get("passes", []) if int(p.get("steps") or 0) > 0]
    every = round(sum(p["batches"] for p in passes) / max(sum(p["steps"] for p in passes), 1)) if passes else None
    if here is None or not here.get("passes"):
        return ": a batch or accumulation count is 0 at this world size"
    length = here["passes"][0].get("length")
    shard = (here.get("sampler") or {}).get("num_samples")
    made = f" (made at {short(trained['site'])})" if trained.get("site") else ""
    samples = f", {shard} samples per rank with batch size {here.get('batch_size')}" if shard is not None else ""
    need = f"; at 1 rank the optimizer stepped every {every} batches" if every else ""
    return (f": its training loader{made} gives each rank {length} batch{'es' if length != 1 else ''} per "
            f"epoch{samples}{need}. The gradients are computed and never applied: nothing trains")


def _explained(problems: dict[tuple[str, str], Problem], world: int, ids: tuple[int, ...]) -> Problem | None:
    """The data problem at this world size whose ranks without batches are the ranks that crashed."""
    for p in problems.values():
        if p.code in (UNEVEN, EMPTY_EVAL) and world in p.cells and set(ids) <= set(p.ranks.get(world, ())):
            return p
    return None


# --- data ------------------------------------------------------------------------------------
def _trains(loader: dict[str, Any]) -> bool:
    return any(int(p.get("steps") or 0) > 0 for p in loader.get("passes", []))


def _shards(ranks: list[RankRun], world: int, add: Any, base: RankRun | None) -> None:
    """Each loader (the same ordinal on every rank: the same program) judged over every rank. A
    loader trains when optimizer steps were taken during its passes, here or at 1 rank (a
    training loader that gives nothing at this size takes no step here)."""
    trained_at_one = {int(i["loader"]) for i in (base.rehearsal.get("loaders", []) if base else []) if _trains(i)}
    loaders: dict[int, dict[int, dict[str, Any]]] = {}
    for run in ranks:
        for info in run.rehearsal.get("loaders", []):
            loaders.setdefault(int(info["loader"]), {})[run.rank] = info
    for ordinal, per_rank in sorted(loaders.items()):
        any_info = next(iter(per_rank.values()))
        training = ordinal in trained_at_one or any(_trains(i) for i in per_rank.values())
        code = UNEVEN if training else EMPTY_EVAL
        what = "training" if training else "evaluation"
        site = any_info.get("site") or (any_info.get("passes") or [{}])[0].get("site")
        key = f"loader {ordinal}"
        lengths = _every_rank(per_rank, world)
        if lengths is None:
            continue
        batch_counts, how = lengths
        empty = [r for r, n in batch_counts.items() if n == 0]
        most = max(batch_counts.values()) if batch_counts else 0
        short_ranks = [r for r, n in batch_counts.items() if n < most]
        size = any_info.get("parent_len") or (any_info.get("sampler") or {}).get("dataset_len") \
            or any_info.get("dataset_len")
        data = f"the {what} set has {size} samples" if size is not None else f"the {what} set is small"
        made = f" (loader made at {short(site)})" if site else ""
        if empty and (not training or len(empty) < len(batch_counts) or most == 0):
            everyone = len(empty) == len(batch_counts)
            who = "every rank" if everyone else f"ranks {rank_ranges(empty)}"
            cell = f"empty on {who}"
            if training:
                msg = (f"{who} draw{'s' if everyone else ''} no training batch{made}: {data}, "
                       f"{how}. " + ("Nothing trains" if everyone else
                                     "The other ranks wait for them at their first gradient all-reduce: "
                                     "the job hangs"))
            else:
                msg = (f"{who} get{'s' if everyone else ''} no evaluation batch{made}: {data}, {how}; "
                       "an average over their batches divides by zero, and collectives in the evaluation "
                       "loop wait for ranks that never enter it")
            add(code, key, world, cell, msg, tuple(empty[:64]), site, empty_ranks=rank_ranges(empty),
                batches={str(k): v for k, v in list(batch_counts.items())[:16]})
        elif training and short_ranks:
            fewer = min(batch_counts.values())
            add(UNEVEN, key, world, f"ranks {rank_ranges(short_ranks)}: {fewer} of {most} batches",
                f"ranks {rank_ranges(short_ranks)} draw {fewer} training batches per epoch, the others "
                f"{most}{made}: {data}, {how}. After their last batch the others wait for them at the "
                "gradient all-reduce: the job hangs", tuple(short_ranks[:64]), site,
                short_ranks=rank_ranges(short_ranks))


def _every_rank(per_rank: dict[int, dict[str, Any]], world: int) -> tuple[dict[int, int], str] | None:
    """Batches per epoch of every rank of the world: computed from a DistributedSampler's
    parameters, from a split `range(rank, n, world)` the rehearsed ranks agree with, or else the
    rehearsed ranks' own `len(loader)`."""
    info = next(iter(per_rank.values()))
    sampler = info.get("sampler") or {}
    bs, drop = info.get("batch_size"), bool(info.get("drop_last"))
    n = info.get("dataset_len")
    if sampler.get("distributed") and n is not None and sampler.get("num_replicas") == world:
        shards = SamplerShards(int(n), world, bool(sampler.get("drop_last")))
        count = batches(shards.per_rank, bs, drop)
        how = (f"{shards.per_rank} samples per rank from DistributedSampler"
               + (", every one of its last ranks only padding" if shards.padded_only() else ""))
        return {r: count for r in range(world)}, how
    parent = info.get("parent_len")
    if parent is not None and all(
            i.get("dataset_len") == strided_shard(int(parent), world, r) for r, i in per_rank.items()):
        counts = {r: batches(strided_shard(int(parent), world, r), bs, drop) for r in range(world)}
        return counts, f"split by rank as range(rank, {parent}, {world})"
    known = {r: _length(i) for r, i in per_rank.items()}
    if any(v is None for v in known.values()):
        return None
    return {r: int(v) for r, v in known.items() if v is not None}, "len(loader) on the rehearsed ranks"


def _length(info: dict[str, Any]) -> int | None:
    passes = info.get("passes") or []
    value = passes[0].get("length") if passes else None
    return None if value is None else int(value)


# --- collectives -----------------------------------------------------------------------------
def _collectives(ranks: list[RankRun], world: int, add: Any, problems: dict[tuple[str, str], Problem]) -> None:
    if any(world in p.cells for p in problems.values() if p.code in (UNEVEN, FAILS, DEVICE, BLOCKED)):
        return  # a rank that stopped early or trained on fewer batches makes fewer calls: said already
    same_end = [r for r in ranks if r.status in ("stopped", "finished") and r.ledger]
    if len(same_end) < 2:
        return
    logs = {}
    for run in same_end:
        world_log = (run.ledger.get("groups") or {}).get("world") or {"entered": 0, "recent": []}
        logs[run.rank] = CallLog.from_json(world_log)
    mismatch = first_mismatch(logs)
    counts = {r: log.entered for r, log in logs.items()}
    if mismatch is None and len(set(counts.values())) == 1:
        return
    text = mismatch.message() if mismatch is not None else ""
    # The rehearsed ranks are a sample, not the world: the smaller side is not the odd one out.
    odd = tuple(sorted(counts))
    sides = [list(side.ranks) for side in mismatch.sides] + ([list(mismatch.missing)] if mismatch.missing else []) \
        if mismatch is not None else [[r] for r in sorted(counts)]
    sides.sort(key=min)
    by_count = ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))
    site = None
    if mismatch is not None:
        calls = [c for s in mismatch.sides for c in s.calls if c.site]
        site = calls[-1].site if calls else None
    add(COLLECTIVES, site or "calls", world, " vs ".join(f"ranks {rank_ranges(side)}" for side in sides),
        f"the rehearsed ranks make different collectives ({by_count} calls in the same bounded run)"
        + (f"; first difference at {text}" if text else "")
        + ". On the cluster the ranks would wait for each other there", tuple(odd), site)


# --- learning rate and facts -----------------------------------------------------------------
def _lr(run: RankRun | None) -> float | None:
    if run is None:
        return None
    opts = run.rehearsal.get("optimizers") or []
    value = opts[0].get("max") if opts else None
    return None if value is None else float(value)


def _learning_rate(ranks: list[RankRun], world: int, base: RankRun | None, add: Any) -> None:
    first = next((r for r in ranks if _lr(r) is not None), None)
    lr, base_lr = _lr(first), _lr(base)
    if first is None or lr is None or not base_lr or world == 1:
        return
    factor = lr / base_lr
    if factor <= LR_FACTOR or not math.isfinite(factor):
        return
    opt = (first.rehearsal.get("optimizers") or [{}])[0].get("class", "the optimizer")
    add(LR, "lr", world, f"lr {factor:.0f}× ({lr:.4g})",
        f"{opt}'s learning rate is {lr:.4g}, {factor:.0f}× its value at 1 rank ({base_lr:.4g}); past "
        f"{LR_FACTOR:.0f}× the linear scaling rule is known to diverge. Cap the growth "
        f"(base_lr × min(world_size, {LR_FACTOR:.0f})) or use the square-root rule, with a warm-up",
        (first.rank,), (first.rehearsal.get("optimizers") or [{}])[0].get("site"), lr=lr, base_lr=base_lr,
        factor=factor)


def _facts(ranks: list[RankRun], world: int) -> dict[str, Any]:
    # Samples per optimizer step on one rank: from a pass's start to its first step (an evaluation
    # pass between two steps, or a pass's last batches, are no part of a step).
    ratios = [p["step_samples"] for r in ranks for info in r.rehearsal.get("loaders", [])
              for p in info.get("passes", []) if p.get("step_samples")]
    per_step = statistics.median(ratios) if ratios else None
    first_lr = next((_lr(r) for r in ranks if _lr(r) is not None), None)
    return {
        "ranks_run": [r.rank for r in ranks],
        "statuses": {str(r.rank): r.status for r in ranks},
        "global_batch": int(per_step * world) if per_step else None,
        "lr": first_lr,
        "seconds_per_rank": max((r.seconds for r in ranks), default=None),
        "peak_mb": max((r.peak_mb or 0 for r in ranks), default=None),
    }


def _ranks_word(ids: tuple[int, ...]) -> str:
    return f"rank {ids[0]}" if len(ids) == 1 else f"ranks {rank_ranges(list(ids))}"
