"""Where the time goes, from the ranks' timing sections: per-rank phase statistics, the straggler,
the dominant phase, throughput and the hints that follow from them. Torch-free; runs in the
launcher after the job.

A timed step is the interval between two optimizer steps of the same rank (the first optimizer that
stepped). Inside it the rank's hooks measured: waiting for the DataLoader (`data`), DDP's forward
(`forward`), `backward()` including DDP's gradient reduction (`backward`), `optimizer.step()`
(`optimizer`) and the collectives the script calls itself (`collectives`); `other` is the rest
(the loss, logging, the script's own code). Under DDP every rank waits for the slowest one inside
the reduction, so a slow rank shows up as extra `backward` on all the *other* ranks: the
straggler is the rank whose own (non-waiting) phases exceed the other ranks', and the phase is
where its excess lies.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

PHASES = ("data", "forward", "backward", "optimizer", "collectives", "other")
MEASURED = PHASES[:-1]
# Where a rank waits for the others (a DDP reduction, an explicit collective).
WAITING = ("backward", "collectives")
SECTION = "timing"

# A straggler spends at least this share of the other ranks' median step, and this many seconds,
# more than they do in its own phases. Timing on shared machines is noisy: only clear cases.
STRAGGLER_SHARE = 0.2
STRAGGLER_MIN_S = 0.005
STRAGGLER_CONSISTENCY = 2 / 3  # ... in at least this share of the steps
# A phase that takes this share of the median step, and this long, is worth a hint.
BOUND_SHARE = 0.4
BOUND_MIN_S = 0.005
# Below this many bytes of gradients a reduction is bound by latency, not bandwidth: bucket sizes
# and compression cannot help, and on a shared CPU its time is mostly waiting for a busy peer.
COMM_MIN_BYTES = 4 * 2**20
# Too few timed steps to say anything.
MIN_STEPS = 3
UNCHECKED_ENOUGH = 10


@dataclass(frozen=True)
class Stats:
    median: float
    p90: float

    def to_dict(self) -> dict[str, float]:
        return {"median": self.median, "p90": self.p90}


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def stats(values: list[float]) -> Stats:
    return Stats(statistics.median(values) if values else 0.0, quantile(values, 0.9))


def timed_steps(section: dict[str, Any]) -> list[dict[str, float]]:
    """A rank's timed steps as {phase: seconds, "total", "step", "samples"}, warm-up dropped."""
    columns = section.get("columns") or ["step", "total", *MEASURED, "samples"]
    rows = [dict(zip(columns, row)) for row in section.get("steps", [])]
    out = []
    for row in rows:
        step = {"step": row.get("step", 0), "samples": row.get("samples", 0),
                "checked": bool(row.get("checked", 0))}
        # ddpcheck's own work inside the window (fingerprints before the step) is not the script's
        total = (row.get("total", 0) - row.get("ours", 0)) / 1e6
        measured = 0.0
        for phase in MEASURED:
            step[phase] = row.get(phase, 0) / 1e6
            measured += step[phase]
        step["other"] = max(0.0, total - measured)
        step["total"] = max(total, measured)
        out.append(step)
    # The first steps after start-up are slower (DDP rebuilds its buckets, caches warm up).
    out = out[min(2, len(out) // 4):]
    # Checked steps carry ddpcheck's own work inside the forward too: leave them out when the
    # unchecked steps alone are enough.
    unchecked = [s for s in out if not s["checked"]]
    return unchecked if len(unchecked) >= UNCHECKED_ENOUGH else out


def _rank_sections(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["rank"]: r["probes"][SECTION] for r in records
            if isinstance(r.get("probes", {}).get(SECTION), dict) and "rank" in r}


def summarise(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The `performance` block of the report, or None when no rank timed a step."""
    sections = _rank_sections(records)
    steps = {rank: timed_steps(sec) for rank, sec in sections.items()}
    steps = {rank: s for rank, s in steps.items() if len(s) >= 1}
    if not steps:
        return None
    ranks = []
    medians: dict[int, dict[str, float]] = {}
    for rank in sorted(steps):
        rows = steps[rank]
        sec = sections[rank]
        phases = {p: stats([s[p] for s in rows]) for p in PHASES}
        total = stats([s["total"] for s in rows])
        medians[rank] = {p: phases[p].median for p in PHASES} | {"total": total.median}
        ranks.append({
            "rank": rank,
            "steps": len(rows),
            "step": total.to_dict(),
            "phases": {p: phases[p].to_dict() for p in PHASES},
            "samples_per_s": _rank_throughput(sec),
            "samples": sec.get("samples", 0),
            "clock": sec.get("clock", "wall"),
        })
    step_median = statistics.median(m["total"] for m in medians.values())
    mean_share = {p: statistics.fmean(m[p] / m["total"] if m["total"] else 0.0 for m in medians.values())
                  for p in PHASES}
    dominant = max(PHASES, key=lambda p: mean_share[p])
    enough = min(len(s) for s in steps.values()) >= MIN_STEPS
    straggler = find_straggler(medians, steps) if enough and len(medians) >= 2 else None
    comm = _ddp_comm(sections)
    first = sections[min(sections)]
    out = {
        "clock": first.get("clock", "wall"),
        "device": first.get("device"),
        # The script asked for CUDA and got the CPU (the emulation probe lists what it emulated).
        "emulated": any(r.get("probes", {}).get("emulation", {}).get("used") for r in records),
        "phases": list(PHASES),
        "timed_steps": min(len(s) for s in steps.values()),
        "enough_steps": enough,
        "ranks": ranks,
        "step_median": step_median,
        "shares": mean_share,
        "dominant": {"phase": dominant, "share": mean_share[dominant]},
        "straggler": straggler,
        "straggler_threshold": STRAGGLER_SHARE,
        "throughput": throughput(records),
        "ddp": comm,
        "loaders": first.get("loaders", []),
        "optimizers": first.get("optimizers", []),
        "graph_walk": _graph_walk(records, step_median),
    }
    out["hints"] = hints(out)
    return out


def find_straggler(medians: dict[int, dict[str, float]],
                   steps: dict[int, list[dict[str, float]]] | None = None) -> dict[str, Any] | None:
    """The rank whose own phases exceed the other ranks' by a clear margin, step after step, or
    None. (A busy machine slows some rank in some steps; a straggler is slow in most of them.)"""
    own = [p for p in PHASES if p not in WAITING]
    best: dict[str, Any] | None = None
    for rank, mine in medians.items():
        others = [m for r, m in medians.items() if r != rank]
        base = {p: statistics.median(m[p] for m in others) for p in PHASES + ("total",)}
        excess = {p: mine[p] - base[p] for p in own}
        extra = sum(max(0.0, e) for e in excess.values())
        # Unsynchronised ranks (no DDP reduction in the step) show it in their step time instead.
        extra = max(extra, mine["total"] - base["total"])
        if extra < max(STRAGGLER_SHARE * base["total"], STRAGGLER_MIN_S):
            continue
        if best is None or extra > best["excess_s"]:
            phase = max(own, key=lambda p: excess[p])
            if excess[phase] < 0.5 * extra:  # no own phase explains it: it is in the waiting ones
                phase = max(PHASES, key=lambda p: mine[p] - base[p])
            waited = {p: statistics.median(m[p] for m in others) - mine[p] for p in WAITING}
            consistent = _slowest_share(rank, steps) if steps else 1.0
            if consistent < STRAGGLER_CONSISTENCY:
                continue
            best = {
                "rank": rank,
                "slowest_in": consistent,
                "excess_s": extra,
                "excess_share": extra / base["total"] if base["total"] else 0.0,
                "phase": phase,
                "phase_excess_s": mine[phase] - base[phase],
                "others_step_s": base["total"],
                "others_wait_s": max(0.0, sum(waited.values())),
            }
    return best


def _own(step: dict[str, float]) -> float:
    """A step's time outside the phases where ranks wait for each other (or its whole time when
    nothing waited)."""
    own = sum(step[p] for p in PHASES if p not in WAITING)
    return own if any(step[p] for p in WAITING) else step["total"]


def _slowest_share(rank: int, steps: dict[int, list[dict[str, float]]]) -> float:
    """In what share of the steps every rank timed `rank` spent the longest in its own phases."""
    by_step = {r: {int(s["step"]): _own(s) for s in rows} for r, rows in steps.items()}
    common = set.intersection(*(set(v) for v in by_step.values()))
    if not common:
        return 0.0
    slowest = sum(1 for n in common if by_step[rank][n] >= max(v[n] for v in by_step.values()))
    return slowest / len(common)


def _rank_throughput(section: dict[str, Any]) -> float | None:
    window = section.get("window")  # [seconds between the first and last step, samples in between]
    if not window or window[0] <= 0 or not window[1]:
        return None
    return float(window[1] / window[0])


def throughput(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Samples per second over all ranks (the batches the loaders yielded between each rank's first
    and last optimizer step), and the global batch (samples per optimizer step, summed over ranks)."""
    sections = _rank_sections(records)
    total = 0.0
    per_step = 0.0
    measured = 0
    for sec in sections.values():
        window = sec.get("window")
        if window and window[0] > 0 and window[2] > 0:
            total += window[1] / window[0]
            per_step += window[1] / window[2]
            measured += 1
    return {
        "samples_per_s": total if measured and total else None,
        "global_batch": round(per_step) if measured and per_step else None,
        "ranks_measured": measured,
    }


def _ddp_comm(sections: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """DDP's own timers (sampled by DDP itself), median over ranks, in seconds."""
    rows = [s["ddp"] for s in sections.values() if isinstance(s.get("ddp"), dict)]
    rows = [r for r in rows if r.get("avg_backward_comm_time")]
    if not rows:
        return None

    def med(key: str) -> float:
        return float(statistics.median(r.get(key, 0) for r in rows)) / 1e9

    comm, overlap = med("avg_backward_comm_time"), med("avg_backward_compute_comm_overlap_time")
    first = rows[0]
    return {
        "forward_s": med("avg_forward_compute_time"),
        "backward_compute_s": med("avg_backward_compute_time"),
        "comm_s": comm,
        "overlap_s": overlap,
        "exposed_comm_s": max(0.0, comm - overlap),
        "bucket_cap_mb": (first.get("bucket_cap_bytes") or 0) / 2**20 or None,
        "buckets": first.get("num_buckets_reduced"),
        "find_unused_parameters": bool(first.get("find_unused_parameters")),
        "unused_parameter_size": first.get("unused_parameter_size"),
        "gradient_bytes": first.get("total_parameter_size_bytes"),
    }


def _graph_walk(records: list[dict[str, Any]], step_median: float) -> dict[str, Any] | None:
    """What find_unused_parameters=True's graph walk after each forward cost (median per forward,
    measured by the find-unused probe)."""
    walks = [m["walk_median_s"] for r in records
             for m in r.get("probes", {}).get("find-unused", {}).get("models", [])
             if m.get("walk_median_s")]
    if not walks:
        return None
    per_step = statistics.median(walks)
    return {"per_step_s": per_step, "share": per_step / step_median if step_median else 0.0}


def hints(perf: dict[str, Any]) -> list[dict[str, str]]:
    """What to try, tied to what was measured."""
    out = []
    shares = perf["shares"]
    straggler = perf.get("straggler")
    if straggler:
        out.append({"kind": "straggler", "text": straggler_hint(straggler)})
    step = perf["step_median"]
    if shares["data"] >= BOUND_SHARE and shares["data"] * step >= BOUND_MIN_S:
        out.append({"kind": "data", "text": data_hint(perf)})
    comm = perf.get("ddp")
    if comm and step and not straggler and (comm.get("gradient_bytes") or 0) >= COMM_MIN_BYTES:
        exposed = comm["exposed_comm_s"] / step
        if exposed >= BOUND_SHARE and comm["exposed_comm_s"] >= BOUND_MIN_S:
            out.append({"kind": "communication", "text": comm_hint(comm, exposed)})
    return out


def data_hint(perf: dict[str, Any]) -> str:
    loaders = perf.get("loaders") or []
    workers = max((ld.get("num_workers", 0) for ld in loaders), default=None)
    now = f" (now {workers})" if workers is not None else ""
    gpu = (perf.get("device") or "").startswith("cuda")
    pin = "; pin_memory=True and .to(device, non_blocking=True) overlap the copy" if gpu else ""
    return (f"Raise the DataLoader's num_workers{now}, keep them alive with persistent_workers=True "
            f"and let them run ahead with prefetch_factor{pin}; move decoding and augmentation "
            "that does not need to happen per step into preprocessing.")


def comm_hint(comm: dict[str, Any], exposed_share: float) -> str:
    cap = f" (now {comm['bucket_cap_mb']:.0f} MB)" if comm.get("bucket_cap_mb") else ""
    return (f"{exposed_share:.0%} of a step is DDP's gradient reduction that backward does not hide: "
            f"try a larger bucket_cap_mb{cap}, accumulate gradients over several micro-batches with "
            "no_sync() so the reduction runs once per step, or a larger per-rank batch.")


_STRAGGLER_FIX = {
    "data": "its input pipeline is slower: check what that rank's shard reads (storage, sample "
            "sizes) and give its DataLoader more workers",
    "forward": "its forward is slower: another process on its device, a slower or throttled device, "
               "or larger inputs on that rank",
    "optimizer": "its optimizer step is slower: work done on that rank only around optimizer.step()",
    "other": "it runs code the others do not between steps (logging, evaluation, checkpointing on "
             "rank 0): do that every N steps or after training, or move it off the training loop",
    "backward": "its backward is slower: another process on its device, a slower or throttled device",
    "collectives": "it spends longer in the collectives the script calls itself",
}


def straggler_hint(s: dict[str, Any]) -> str:
    fix = _STRAGGLER_FIX[s["phase"]]
    return (f"Rank {s['rank']} takes {s['excess_s'] * 1e3:.0f} ms longer per step than the other ranks, "
            f"in {s['phase']}; they wait for it in DDP's gradient reduction ({s['excess_share']:.0%} of "
            f"every step). {fix[0].upper()}{fix[1:]}.")


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"
