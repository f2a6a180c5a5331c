"""What the collective ledger and its fingerprints cost, measured against baselines in the same run.

    python bench/collectives_bench.py [--reps 3] [--nproc 2,4] [--steps 60]

1. Per checked step: the same job (bench/workloads/train_ddp.py, the 1 M-parameter MLP) under
   `ddpcheck run --check-first 0 --check-every 1`, once with every probe and once with every probe
   but `collectives`: the difference is what the fingerprints add to a checked step (staging the
   count and running hash, two more int64 per rank in the exchange, the comparison).
2. Per call, in this process: the ledger's work for one collective (enter and leave, with the live
   file), for one training step's events (a DDP forward, its backward, a batch, an optimizer
   step), and the rank record's ledger section written at checked steps — against an empty
   Python call and a 1-element gloo all_reduce on a 1-rank group.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "workloads" / "train_ddp.py"
ALL_BUT = "shards,inputs,set-epoch,grads,params,lifecycle,rendezvous"


def job(checks: str, nproc: int, steps: int, out: Path) -> float:
    """Mean step time (s) of the workload under ddpcheck, every step checked."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", BENCH_T0=repr(time.time()),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "ddpcheck", "run", "--nproc", str(nproc), "--quiet", "--check-first", "0",
           "--check-every", "1", "--checks", checks, str(SCRIPT), "--model", "1m", "--steps", str(steps),
           "--out", str(out)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if len(ranks) != nproc:
        raise SystemExit(f"{checks} x{nproc} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return statistics.fmean(r["step_mean_s"] for r in ranks)


def best(fn: Callable[[], object], n: int, reps: int = 7) -> float:
    """Best-of-`reps` seconds per call of `fn` over `n` calls."""
    fn()
    out = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        out = min(out, (time.perf_counter() - start) / n)
    return out


def micro() -> dict[str, float]:
    """Seconds per operation, in this process (one rank, gloo)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29661")
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddpcheck.run.rank import ledger, sites

    dist.init_process_group("gloo", rank=0, world_size=1)
    one = torch.ones(1)
    out = {"gloo all_reduce of 1 float, 1 rank (reference)": best(lambda: dist.all_reduce(one), 2000)}
    ledger.install(sites.call_site)
    ledger.open_live(tempfile.mkdtemp(prefix="ddpcheck-bench-"), 0)
    book = ledger.LEDGER

    def noop(tensor: object, op: object = None, group: object = None, async_op: bool = False) -> None:
        return None

    # The whole wrapper (site, signature, ledger, live file) around a collective that does nothing:
    # timing it around a real gloo call in a tight loop would mostly measure gloo's thread wake-ups.
    wrapped = ledger._recorded("all_reduce", noop, sites.call_site)
    out["ledger wrapper around one collective"] = best(lambda: wrapped(one), 20000) - best(lambda: noop(one), 20000)

    def one_call() -> None:
        book.leave(book.enter("all_reduce", "float32[1]", "/x/train.py:10"))

    model = DDP(nn.Linear(8, 1))
    pass_ = book.start_pass(0, 0, "/x/train.py:5")

    def step_events() -> None:  # what the ledger does in one training step
        ledger.forward_started(model)
        ledger._pending.clear()
        one_call()  # the backward's entry
        book.batch(pass_)
        book.stepped()

    out["ledger: one step's events"] = best(step_events, 20000)
    for i in range(60):
        book.start_pass(0, i + 1, "/x/train.py:5")
    out["ledger section (checked step)"] = best(book.section, 2000)
    dist.destroy_process_group()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nproc", default="2,4")
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddpcheck-collectives-bench-"))
    load = os.getloadavg()[0]
    rows = []
    for nproc in (int(n) for n in args.nproc.split(",")):
        with_, without = [], []
        for rep in range(args.reps):  # interleaved, so that load changes hit both alike
            without.append(job(ALL_BUT, nproc, args.steps, work / f"without-{nproc}-{rep}"))
            with_.append(job(ALL_BUT + ",collectives", nproc, args.steps, work / f"with-{nproc}-{rep}"))
            print(f"  x{nproc} rep {rep}: without {without[-1] * 1e3:.2f} ms, with {with_[-1] * 1e3:.2f} ms",
                  file=sys.stderr, flush=True)
        rows.append((nproc, statistics.median(without), statistics.median(with_)))
    costs = micro()
    print(f"### Collective fingerprints: cost per checked step (1M MLP, every step checked, median of "
          f"{args.reps}, load {load:.1f} → {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print()
    print("| ranks | step ms without `collectives` | with | fingerprints per checked step |")
    print("| ---: | ---: | ---: | ---: |")
    for nproc, without_s, with_s in rows:
        print(f"| {nproc} | {without_s * 1e3:.2f} | {with_s * 1e3:.2f} | {(with_s - without_s) * 1e3:+.3f} ms "
              f"({(with_s / without_s - 1) * 100:+.1f} %) |")
    print()
    print("| in one process (best of 7) | µs |")
    print("| --- | ---: |")
    for name, seconds in costs.items():
        print(f"| {name} | {seconds * 1e6:.2f} |")


if __name__ == "__main__":
    main()
