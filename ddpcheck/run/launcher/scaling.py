"""`ddpcheck run --scaling 1,2,4 SCRIPT ...`: the same job at several world sizes, compared.

Each run is an ordinary checked run on this node (`--nproc N`). From each run's `performance`
block: throughput (samples per second from the batches the loaders yielded, all ranks), the global
batch (samples per optimizer step over all ranks), the median step, and the learning rate the
first optimizer actually used (the largest value its first param group had, so a warm-up does not
hide it). Against the smallest world size: speed-up, scaling efficiency (speed-up / size ratio) and
the learning rate the linear scaling rule asks for (lr × global-batch ratio; Goyal et al. 2017).
Torch-free.
"""

from __future__ import annotations

import math
from typing import Any

from ddpcheck.catalog import code_named
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Verdict

# The lr verdict is the timing probe's check (run/checks/timing.py), judged here across runs.
CODE = code_named("learning-rate-ignores-world-size")
SAME_LR = 0.05  # relative difference below which two learning rates count as the same
MIN_BATCH_GROWTH = 1.5


def run_entry(world_size: int, report: dict[str, Any], exit_code: int) -> dict[str, Any]:
    """One row of the scaling table from one run's report."""
    run = report.get("run", {})
    perf = run.get("performance") or {}
    tp = perf.get("throughput") or {}
    opts = perf.get("optimizers") or []
    lr = opts[0]["max"] if opts else None
    return {
        "world_size": world_size,
        "ok": not run.get("job", {}).get("script_exit_code"),
        "exit_code": exit_code,
        "samples_per_s": tp.get("samples_per_s"),
        "global_batch": tp.get("global_batch"),
        "step_median": perf.get("step_median"),
        "lr": lr,
        "optimizer": opts[0]["class"] if opts else None,
        "findings": sorted({f["code"] for f in report.get("findings", [])}),
    }


def summarise(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], Verdict]:
    """The `scaling` block of the report (speed-up, efficiency, expected lr) and the lr verdict."""
    runs = sorted(runs, key=lambda r: r["world_size"])
    base = next((r for r in runs if r.get("samples_per_s")), None)
    for r in runs:
        r["speedup"] = r["efficiency"] = r["lr_expected"] = None
        if base and r.get("samples_per_s"):
            r["speedup"] = r["samples_per_s"] / base["samples_per_s"]
            r["efficiency"] = r["speedup"] / (r["world_size"] / base["world_size"])
    verdict = lr_verdict(runs)
    block = {"runs": runs, "base_world_size": base["world_size"] if base else None,
             "lr_verdict": verdict.message if verdict.status == FAIL else None}
    return block, verdict


def lr_verdict(runs: list[dict[str, Any]]) -> Verdict:
    measured = [r for r in runs if r.get("lr") is not None and r.get("global_batch")]
    if len(measured) < 2:
        return Verdict(CODE, SKIP, "no learning rate and global batch measured at two world sizes")
    base = measured[0]
    for r in measured:
        r["lr_expected"] = base["lr"] * r["global_batch"] / base["global_batch"]
    last = measured[-1]
    growth = last["global_batch"] / base["global_batch"]
    if growth < MIN_BATCH_GROWTH:
        return Verdict(CODE, SKIP, f"the global batch did not grow ({base['global_batch']} → {last['global_batch']})")
    ratio = last["lr"] / base["lr"] if base["lr"] else math.inf
    if abs(ratio - 1) > SAME_LR:
        how = f"{ratio:.2g}×" if math.isfinite(ratio) else "from 0"
        return Verdict(CODE, PASS, f"the learning rate grew {how} with the global batch ({growth:.2g}×)")
    sizes = ", ".join(str(r["world_size"]) for r in measured)
    adam = (last.get("optimizer") or "").lower().startswith(("adam", "lamb", "lion"))
    alt = (f" (for {last['optimizer']}, a square-root rule, {math.sqrt(growth):.2g}× to "
           f"{base['lr'] * math.sqrt(growth):.4g}, is common)") if adam else ""
    return Verdict(
        CODE, FAIL,
        f"lr {base['lr']:.4g} at every world size; global batch {base['global_batch']} → {last['global_batch']}",
        message=(f"The learning rate stayed {base['lr']:.4g} at {sizes} ranks while the global batch grew "
                 f"{growth:.2g}× ({base['global_batch']} → {last['global_batch']}): by the linear scaling "
                 f"rule it should have grown {growth:.2g}× too, to {base['lr'] * growth:.4g}{alt}. Scale "
                 "it with the world size (lr = base_lr × world_size × per-rank batch / base batch), "
                 "with a warm-up, or keep the global batch fixed by shrinking the per-rank batch."),
        severity="warning", details={"lr": base["lr"], "growth": growth, "expected": base["lr"] * growth})
