"""What `ddpcheck run` costs, as ratios against baselines measured in the same run.

    python bench/run_bench.py [--reps 3] [--plan 1m:2:100,1m:4:100] [--quick]
    python bench/run_bench.py --pairs 7 [--pair-plan every-step:1m:2:30,default:1m:2:30]

`--pairs N` measures only the per-step overhead, robustly: N interleaved pairs (torchrun, then
`ddpcheck run`, the order alternating) after one excluded warm-up pair, wall and CPU time per step,
the median with its interquartile range and min–max and the load beside each pair, and a verdict
that a target is met only when the upper quartile is within it (see bench/README.md).

Rows:

- per-step overhead: the same script (bench/workloads/train_ddp.py, a correct DDP script timing
  its own steps after a 20-step warm-up) under plain torchrun, under `ddpcheck run` at the default
  cadence (every step for the first 20, then every 50th: past the warm-up, the steady state) and
  under `ddpcheck run --check-first 0 --check-every 1` (every step); on the plan's first entry
  also at the default cadence without the timing probe (what per-rank phase timing costs). Gloo
  on CPU, OMP_NUM_THREADS=1. The modes take turns within each repetition, and the overhead is the
  median over repetitions of each repetition's ratio to its own torchrun job;
- gradient fingerprint throughput: `fingerprints()` against `torch.sum` over the same
  gradient-shaped tensors (1, 5 and 25 M parameters, and the 1 M MLP's six tensors), one thread,
  the two interleaved, median of 200 (1 M) to 15 (25 M) rounds of thread CPU time (target ≥ 60 %);
- report size: the JSON report of the same job checked at every step, for N and 2N checked steps;
- the collective ledger (always on, whatever is selected): its work for one training step's events,
  in this process (bench/collectives_bench.py's micro-benchmark), as a share of the torchrun step.

Each figure is printed with the load average (`os.getloadavg`) seen while it was taken, and the run
ends with the targets: each row measured, its target, and whether this run met it. Targets are
judged on the 1 M-parameter rows; figures taken on a loaded machine (load above the core count)
are said to be indicative only.
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
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "workloads" / "train_ddp.py"
MODES = ("torchrun", "default", "every-step")
DEFAULT_TARGET = {2: 0.03, 4: 0.05}  # per-step overhead at the default cadence, by ranks
EVERY_STEP_TARGET = 0.15
FINGERPRINT_TARGET = 0.60  # of torch.sum's throughput, at every size from 1 M up
WORKLOAD_WARMUP = 20  # bench/workloads/train_ddp.py's --warmup default (= ddpcheck's --check-first)
CHECK_EVERY = 50  # ddpcheck's --check-every default
MEMORY_TARGET_MIB = 50  # extra peak RSS per rank under `ddpcheck run`
GROWTH_TARGET = 0.05  # the report after 2N checked steps at most this much larger than after N


class Targets:
    """Every row with a target: what was measured, the target, met or not, the load."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, bool | None, float]] = []

    def add(self, row: str, measured: str, target: str, met: bool | None, load: float) -> None:
        self.rows.append((row, measured, target, met, load))

    def print(self) -> None:
        cores = os.cpu_count() or 1
        print("### Targets\n")
        print("| row | measured | target | met | load |")
        print("| --- | ---: | ---: | :---: | ---: |")
        for row, measured, target, met, ld in self.rows:
            verdict = "—" if met is None else ("yes" if met else "**no**")
            print(f"| {row} | {measured} | {target} | {verdict} | {ld:.1f} |")
        loaded = [r for r in self.rows if r[4] > cores]
        passed = sum(1 for r in self.rows if r[3])
        judged = sum(1 for r in self.rows if r[3] is not None)
        print(f"\n{passed} of {judged} targets met in this run.")
        if loaded:
            print(f"{len(loaded)} of {len(self.rows)} rows were taken with a load above {cores} (the core "
                  "count): their figures are indicative only; rerun on a quiet machine for the record.")


def load() -> float:
    return os.getloadavg()[0]


def env_for() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    env["BENCH_T0"] = repr(time.time())
    return env


def records_bytes(report: Path) -> int:
    """The report's size without its findings and performance hints (those follow what the run
    measured; the per-check records are what would grow with the number of checked steps)."""
    data = json.loads(report.read_text())
    data.pop("findings", None)
    data.get("run", {}).get("performance", {}).pop("hints", None)
    return len(json.dumps(data))


def launch(mode: str, nproc: int, model: str, steps: int, out: Path, report: Path | None,
           warmup: int | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    script = [str(SCRIPT), "--model", model, "--steps", str(steps), "--out", str(out)]
    if warmup is not None:
        script += ["--warmup", str(warmup)]
    if mode == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *script]
    else:
        cmd = [sys.executable, "-m", "ddpcheck", "run", "--nproc", str(nproc), "--quiet"]
        if mode == "every-step":
            cmd += ["--check-first", "0", "--check-every", "1"]
        if mode == "no-timing":  # the default cadence with every probe but the step timing
            from ddpcheck.run.registry import probe_names

            cmd += ["--checks", ",".join(p for p in probe_names() if p != "timing")]
        if report is not None:
            cmd += ["--report", str(report)]
        cmd += script
    start, load_before = time.perf_counter(), load()
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        child = subprocess.Popen(cmd, env=env_for(), cwd=ROOT, stdout=fout, stderr=ferr, text=True)
        # wait4 gives the peak RSS of the largest process among the launcher and every descendant
        # it waited for (the ranks): that covers what a rank does after the script has returned
        # (ddpcheck's report, its last exchange), which a figure read inside the script cannot.
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        fout.seek(0)
        ferr.seek(0)
        proc = subprocess.CompletedProcess(cmd, child.returncode, fout.read(), ferr.read())
    wall = time.perf_counter() - start
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)
             if (out / f"rank{r}.json").exists()]
    if len(ranks) != nproc:
        raise SystemExit(f"{mode} {model} x{nproc} failed (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {
        "wall": wall,
        "load": (load_before + load()) / 2,
        "step": statistics.fmean(r["step_mean_s"] for r in ranks),
        "cpu_step": (statistics.fmean(r["cpu_step_mean_s"] for r in ranks)
                     if all(r.get("cpu_step_mean_s") for r in ranks) else None),
        "thread_step": (statistics.fmean(r["thread_cpu_step_mean_s"] for r in ranks)
                        if all(r.get("thread_cpu_step_mean_s") for r in ranks) else None),
        "first_step": max(r["launch_to_first_step_s"] for r in ranks),
        "rss": statistics.fmean(r["maxrss_mib"] for r in ranks),
        "vmhwm": [float((out / f"rank{r}.vmhwm").read_text()) for r in range(nproc)
                  if (out / f"rank{r}.vmhwm").exists()],
        "job_maxrss": usage.ru_maxrss / 1024,
        "params": ranks[0]["params"],
        "report_bytes": report.stat().st_size if report is not None and report.exists() else None,
    }


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median, upper quartile (inclusive method: defined for 2 values and up)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def verdict(q1: float, q3: float, limit: float) -> str:
    """A target is met only when the spread allows the claim: the upper quartile of the pairs'
    overheads within it, and the interquartile range no wider than the target itself (a wider
    spread is the machine's noise, which can put even the upper quartile below the target by
    chance: a median of -16 % on 2 loaded cores is not a faster run). Missed when even the lower
    quartile is above it; otherwise this run cannot say."""
    if q1 > limit:
        return "**not met**"
    if q3 - q1 > limit:
        return f"undecided (the spread, {(q3 - q1) * 100:.0f} points between the quartiles, is wider than the target)"
    if q3 <= limit:
        return "met"
    return "undecided (spread straddles the target)"


def paired(mode: str, model: str, nproc: int, steps: int, pairs: int, limit: float, work: Path) -> None:
    """Interleaved pairs: torchrun and `ddpcheck run` (MODE) back to back, the order alternating
    from pair to pair so a drift in the machine's load falls on both sides; one warm-up pair
    first, excluded (it pays for cold file caches). Each pair gives one ratio, for wall time per
    step and for CPU time per step (all threads of each rank process); the table gives the median
    with its interquartile range and min–max, and the load average beside each pair."""
    print(f"### Interleaved pairs: `ddpcheck run` ({mode}) vs torchrun, {model} at {nproc} ranks, "
          f"{steps} timed steps, {pairs} pairs after 1 warm-up pair\n")
    if mode == "default":
        # The workload times the steps after its 20-step warm-up; the default cadence checks the
        # first 20 and then every 50th, so a window of a multiple of 50 steps holds the steady share.
        checked = (WORKLOAD_WARMUP + steps) // CHECK_EVERY - WORKLOAD_WARMUP // CHECK_EVERY
        print(f"The timed window holds {checked} checked step(s) of {steps} ({checked / steps:.1%}; "
              f"the steady state is {1 / CHECK_EVERY:.0%}).\n")
    print("| pair | order | torchrun wall ms | ddpcheck wall ms | wall overhead | torchrun CPU ms "
          "| ddpcheck CPU ms | CPU overhead | torchrun thread ms | ddpcheck thread ms | thread's extra / torchrun CPU "
          "| load |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    wall: list[float] = []
    cpu: list[float] = []
    thread: list[float] = []
    loads: list[float] = []
    for i in range(pairs + 1):
        order = ("torchrun", mode) if i % 2 == 0 else (mode, "torchrun")
        got = {m: launch(m, nproc, model, steps, work / f"pair-{mode}-{nproc}-{i}-{m}", None) for m in order}
        base, ours = got["torchrun"], got[mode]
        ld = (base["load"] + ours["load"]) / 2
        w = ours["step"] / base["step"] - 1
        c = (ours["cpu_step"] / base["cpu_step"] - 1) if ours["cpu_step"] and base["cpu_step"] else None
        # The training thread's extra CPU as a share of torchrun's whole step (every thread): the
        # step the target is about, with the gloo threads' scheduling noise left out of the difference.
        t = ((ours["thread_step"] - base["thread_step"]) / base["cpu_step"]
             if ours["thread_step"] and base["thread_step"] and base["cpu_step"] else None)
        tag = "warm-up (excluded)" if i == 0 else str(i)
        cpu_cells = (f"{base['cpu_step'] * 1e3:.2f} | {ours['cpu_step'] * 1e3:.2f} | {c * 100:+.1f} %"
                     if c is not None else "— | — | —")
        thread_cells = (f"{base['thread_step'] * 1e3:.2f} | {ours['thread_step'] * 1e3:.2f} | {t * 100:+.1f} %"
                        if t is not None else "— | — | —")
        print(f"| {tag} | {' → '.join(order)} | {base['step'] * 1e3:.2f} | {ours['step'] * 1e3:.2f} | "
              f"{w * 100:+.1f} % | {cpu_cells} | {thread_cells} | {ld:.1f} |", flush=True)
        if i == 0:
            continue
        wall.append(w)
        loads.append(ld)
        if c is not None:
            cpu.append(c)
        if t is not None:
            thread.append(t)
    print()
    for label, values in (("wall time per step", wall), ("CPU time per step", cpu),
                          ("the training thread's extra CPU time per step, as a share of torchrun's CPU "
                           "time per step", thread)):
        if not values:
            continue
        q1, q2, q3 = quartiles(values)
        print(f"- {label}: median {q2 * 100:+.1f} %, IQR {q1 * 100:+.1f} … {q3 * 100:+.1f} %, "
              f"min–max {min(values) * 100:+.1f} … {max(values) * 100:+.1f} % over {len(values)} pairs, "
              f"load {min(loads):.1f}–{max(loads):.1f}; target ≤ {limit:.0%}: {verdict(q1, q3, limit)}")
    print()


def memory(model: str, ranks: list[int], steps: int, pairs: int, work: Path) -> None:
    """Peak resident memory per rank (VmHWM, read by each rank at exit, after its process group is
    gone) under plain torchrun and under `ddpcheck run` at the default cadence and at every step:
    the three jobs back to back, their order rotating from pair to pair, one warm-up round first,
    excluded. A rank's figure is the mean of its job's ranks; a pair's difference is ddpcheck's
    minus torchrun's of the same round. Memory does not depend on the machine's load the way time
    does, so a few pairs suffice."""
    modes = ("torchrun", "default", "every-step")
    print(f"### Peak RSS per rank (VmHWM at exit): `ddpcheck run` vs torchrun, {model}, {steps} steps "
          f"after the workload's warm-up, {pairs} rounds after 1 warm-up round\n")
    print("| ranks | round | torchrun MiB | default MiB | every-step MiB | default − torchrun | "
          "every-step − torchrun | largest process, torchrun / default / every-step MiB | load |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary = []
    for nproc in ranks:
        diffs: dict[str, list[float]] = {"default": [], "every-step": []}
        job_diffs: dict[str, list[float]] = {"default": [], "every-step": []}
        loads: list[float] = []
        for i in range(pairs + 1):
            order = modes[i % 3:] + modes[:i % 3]
            got = {m: launch(m, nproc, model, steps, work / f"mem-{model}-{nproc}-{i}-{m}", None, warmup=5)
                   for m in order}
            peak = {m: statistics.fmean(got[m]["vmhwm"]) for m in modes}
            ld = statistics.fmean(got[m]["load"] for m in modes)
            d = {m: peak[m] - peak["torchrun"] for m in diffs}
            jobs = {m: got[m]["job_maxrss"] for m in modes}
            tag = "warm-up (excluded)" if i == 0 else str(i)
            print(f"| {nproc} | {tag} | {peak['torchrun']:.1f} | {peak['default']:.1f} | "
                  f"{peak['every-step']:.1f} | {d['default']:+.1f} | {d['every-step']:+.1f} | "
                  f"{' / '.join(f'{jobs[m]:.1f}' for m in modes)} | {ld:.1f} |",
                  flush=True)
            if i:
                loads.append(ld)
                for m in diffs:
                    diffs[m].append(d[m])
                    job_diffs[m].append(jobs[m] - jobs["torchrun"])
        summary.append((nproc, diffs, job_diffs, loads))
    print()
    for nproc, diffs, job_diffs, loads in summary:
        for m, values in diffs.items():
            worst = max(values)
            jd = job_diffs[m]
            print(f"- {nproc} ranks, {m}: median {statistics.median(values):+.1f} MiB per rank, "
                  f"range {min(values):+.1f} … {worst:+.1f} over {len(values)} rounds, load "
                  f"{min(loads):.1f}–{max(loads):.1f}; target ≤ +{MEMORY_TARGET_MIB} MiB: "
                  f"{'met' if worst <= MEMORY_TARGET_MIB else '**not met**'}; the largest process of the job "
                  f"(after the script returned too): median {statistics.median(jd):+.1f} MiB")
    print()


def interleaved(fns: dict[str, Callable[[], object]], reps: int = 15) -> dict[str, float]:
    """Median CPU seconds of this thread for each function, the functions taking turns (torch
    runs one thread here, so other processes taking the cores do not count)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.thread_time()
            fn()
            times[name].append(time.thread_time() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def fingerprint_rows() -> list[dict[str, Any]]:
    """fingerprints() vs torch.sum over the same tensors (each reduced to numbers on the host)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from ddpcheck.run.rank.fingerprint import fingerprints

    torch.set_num_threads(1)
    workloads: list[tuple[str, list[Any]]] = []
    for size in (1_000_000, 5_000_000, 25_000_000):
        rows_each = size * 45 // 100 // 1000  # shaped like an MLP's gradients: two matrices, a vector
        shapes = [(rows_each, 1000), (rows_each, 1000), (size - 2 * rows_each * 1000,)]
        workloads.append((f"{size / 1e6:.0f} M (3 tensors)", [torch.randn(*s) for s in shapes]))
    mlp = [(1024, 784), (1024,), (256, 1024), (256,), (10, 256), (10,)]
    workloads.append(("1 M MLP (6 tensors)", [torch.randn(*s) for s in mlp]))
    out = []
    for label, grads in workloads:
        fingerprints(grads)  # weights cached, as from the second checked step on
        before = load()
        size = sum(g.numel() for g in grads)
        t = interleaved({"fp": lambda: fingerprints(grads),
                         "sum": lambda: torch.stack([g.sum() for g in grads]).tolist()},
                        reps=max(15, min(200, 200_000_000 // size)))
        out.append({"label": label, "bytes": sum(g.numel() * g.element_size() for g in grads),
                    "fp": t["fp"], "sum": t["sum"], "load": (before + load()) / 2})
    return out


def ledger_costs() -> dict[str, float]:
    """bench/collectives_bench.py's in-process figures for the ledger, in a child process (it
    initialises a process group of its own)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import collectives_bench as c; "
            "print(json.dumps(c.micro()))")
    env = dict(env_for(), MASTER_PORT=str(29600 + os.getpid() % 300))
    proc = subprocess.run([sys.executable, "-c", code, str(HERE)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the ledger micro-benchmark failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each job (median reported; at least 3)")
    ap.add_argument("--quick", action="store_true", help="one repetition, 1M at 2 ranks, fewer steps (a smoke run)")
    ap.add_argument("--plan", default="1m:2:100,1m:4:100", help="MODEL:RANKS:STEPS,... (steps after the warm-up)")
    ap.add_argument("--growth-steps", type=int, default=100, help="N of the report-size pair (N and 2N checked steps)")
    ap.add_argument("--pairs", type=int, default=0,
                    help="only the interleaved-pairs rows: N pairs (after one warm-up pair) per --pair-plan entry")
    ap.add_argument("--pair-plan", default="every-step:1m:2:30,default:1m:2:200",
                    help="MODE:MODEL:RANKS:STEPS,... for --pairs (MODE: default or every-step)")
    ap.add_argument("--memory", type=int, default=0,
                    help="only the peak-RSS rows: N rounds (after one warm-up round) per --memory-plan entry")
    ap.add_argument("--memory-plan", default="small:2,4,8:10;1m:2,4,8:10",
                    help="MODEL:RANKS,...:STEPS;... for --memory (entries separated by ';')")
    ap.add_argument("--skip-jobs", action="store_true", help="only the in-process fingerprint rows")
    args = ap.parse_args()

    if args.memory:
        work = Path(tempfile.mkdtemp(prefix="ddpcheck-run-memory-"))
        print(f"CPU, gloo, OMP_NUM_THREADS=1, {os.cpu_count()} cores, load at start {load():.1f}\n")
        for item in args.memory_plan.split(";"):
            model, ranks, steps = item.split(":")
            memory(model, [int(r) for r in ranks.split(",")], int(steps), args.memory, work)
        return

    if args.pairs:
        work = Path(tempfile.mkdtemp(prefix="ddpcheck-run-pairs-"))
        print(f"CPU, gloo, OMP_NUM_THREADS=1, {os.cpu_count()} cores, load at start {load():.1f}\n")
        for item in args.pair_plan.split(","):
            mode, model, ranks, steps = item.split(":")
            limit = EVERY_STEP_TARGET if mode == "every-step" else DEFAULT_TARGET.get(int(ranks), 0.05)
            paired(mode, model, int(ranks), int(steps), args.pairs, limit, work)
        return

    plan = [(m, int(r), int(n)) for m, r, n in (item.split(":") for item in args.plan.split(","))]
    reps = args.reps
    if args.quick:
        plan, reps, args.growth_steps = [("1m", 2, 40)], 1, 20
    elif reps < 3:
        ap.error("--reps must be at least 3 (the median of fewer is not a figure)")
    work = Path(tempfile.mkdtemp(prefix="ddpcheck-run-bench-"))
    targets = Targets()
    print(f"### ddpcheck run vs plain torchrun (CPU, gloo, OMP_NUM_THREADS=1, {os.cpu_count()} cores, "
          f"median of {reps})\n")
    torchrun_step: float | None = None

    if not args.skip_jobs:
        print("| workload | ranks | torchrun step ms | default cadence | every step | start-up extra s "
              "| extra RSS MiB | load |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        timing: tuple[str, int, list[float]] | None = None
        for model, nproc, steps in plan:
            modes = (*MODES, "no-timing") if (model, nproc, steps) == plan[0] else MODES
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            for rep in range(reps):
                for mode in modes:
                    out = work / f"{model}-{nproc}-{mode}-{rep}"
                    report = out / "report.json" if mode != "torchrun" else None
                    runs[mode].append(launch(mode, nproc, model, steps, out, report))
                    r = runs[mode][-1]
                    print(f"  {model} x{nproc} {mode} #{rep}: step {r['step'] * 1e3:.1f} ms, load {r['load']:.1f}",
                          file=sys.stderr, flush=True)
            base = runs["torchrun"]

            def overhead(mode: str) -> float:
                return float(statistics.median(run["step"] / b["step"] - 1 for run, b in zip(runs[mode], base)))

            def ratio(mode: str) -> str:
                values = [run["step"] / b["step"] - 1 for run, b in zip(runs[mode], base)]
                spread = f" ({min(values) * 100:+.1f}…{max(values) * 100:+.1f})" if len(values) > 1 else ""
                return f"{statistics.median(values) * 100:+.1f} %{spread}"

            start = statistics.median(r["first_step"] - b["first_step"] for r, b in zip(runs["default"], base))
            rss = statistics.median(r["rss"] - b["rss"] for r, b in zip(runs["default"], base))
            loads = [r["load"] for m in modes for r in runs[m]]
            if "no-timing" in runs:
                timing = (model, nproc, [w["step"] / wo["step"] - 1 for w, wo in zip(runs["default"], runs["no-timing"])])
            print(f"| {model} ({base[0]['params'] / 1e6:.2f} M params) | {nproc} | "
                  f"{statistics.median(b['step'] for b in base) * 1e3:.1f} | {ratio('default')} | "
                  f"{ratio('every-step')} | {start:+.2f} | {rss:+.0f} | {min(loads):.1f}–{max(loads):.1f} |")
            if model == "1m":
                worst = max(loads)
                if torchrun_step is None:
                    torchrun_step = statistics.median(b["step"] for b in base)
                if nproc in DEFAULT_TARGET:
                    limit = DEFAULT_TARGET[nproc]
                    targets.add(f"per-step overhead, default cadence, {nproc} ranks", f"{overhead('default'):+.1%}",
                                f"≤ {limit:.0%}", overhead("default") <= limit, worst)
                targets.add(f"per-step overhead, every step checked, {nproc} ranks", f"{overhead('every-step'):+.1%}",
                            f"≤ {EVERY_STEP_TARGET:.0%}", overhead("every-step") <= EVERY_STEP_TARGET, worst)
        print()
        if timing is not None:
            share = statistics.median(timing[2])
            print(f"Timing probe (per-rank phases; DDP140-DDP143) at the default cadence, {timing[0]} x{timing[1]}: "
                  f"{share * 100:+.1f} % step time with it against without.\n")
            targets.add(f"timing probe's share, default cadence, {timing[0]} x{timing[1]}", f"{share:+.1%}",
                        "within the default-cadence budget", None, load())

        model, nproc, _ = plan[0]
        sizes = []
        for n in (args.growth_steps, 2 * args.growth_steps):
            out = work / f"growth-{n}"
            result = launch("every-step", nproc, model, n, out, out / "report.json")
            sizes.append((n, result["report_bytes"], records_bytes(out / "report.json"), result["load"]))
        # Which findings and hints a run gets depends on what it measured (a communication-bound
        # verdict may appear in one run of the pair only), not on how many steps it checked: the
        # records kept per check are what must not grow with the steps.
        growth = sizes[1][2] / sizes[0][2] - 1
        print(f"Report size, {model} at {nproc} ranks, every step checked: "
              + "; ".join(f"{n} + 20 warm-up checked steps: {b} bytes, {r} without findings and hints "
                          f"(load {ld:.1f})" for n, b, r, ld in sizes)
              + f"; growth of the records {growth:+.1%}.\n")
        targets.add(f"JSON report records, {sizes[0][0]} → {sizes[1][0]} checked steps (+20 warm-up)",
                    f"{sizes[0][2] / 1024:.1f} → {sizes[1][2] / 1024:.1f} KiB ({growth:+.1%}; whole file "
                    f"{sizes[0][1] / 1024:.1f} → {sizes[1][1] / 1024:.1f} KiB)",
                    f"bounded (≤ {GROWTH_TARGET:+.0%})", growth <= GROWTH_TARGET, max(s[3] for s in sizes))

        before = load()
        costs = ledger_costs()
        per_step = costs["ledger: one step's events"]
        share = per_step / torchrun_step if torchrun_step else 0.0
        print(f"Collective ledger (always on), in this process: {per_step * 1e6:.1f} µs for one training "
              f"step's events (a DDP forward, its backward's all-reduce, a batch, an optimizer step), "
              f"{costs['ledger wrapper around one collective'] * 1e6:.1f} µs per collective the script calls "
              + (f"= {share:.2%} of a torchrun step of the 1 M MLP at 2 ranks.\n" if torchrun_step else ".\n"))
        targets.add("collective ledger, per step (in the default-cadence overhead)",
                    f"{per_step * 1e6:.1f} µs" + (f" ({share:.2%} of a step)" if torchrun_step else ""),
                    "within the default-cadence budget", None, (before + load()) / 2)

    print("Fingerprint (ddpcheck.run.rank.fingerprint.fingerprints) vs torch.sum over the same tensors, "
          "one thread, interleaved, median of 200 (1 M) down to 15 (25 M) rounds of thread CPU time:\n")
    print("| tensors | MB | fingerprint ms | torch.sum ms | fingerprint / sum throughput | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in fingerprint_rows():
        print(f"| {r['label']} | {r['bytes'] / 1e6:.0f} | {r['fp'] * 1e3:.2f} | {r['sum'] * 1e3:.2f} | "
              f"{r['sum'] / r['fp'] * 100:.0f} % | {r['load']:.1f} |")
        throughput = r["sum"] / r["fp"]
        targets.add(f"fingerprint throughput / torch.sum, {r['label']}", f"{throughput:.0%}",
                    f"≥ {FINGERPRINT_TARGET:.0%}", throughput >= FINGERPRINT_TARGET, r["load"])
    print()
    targets.print()


if __name__ == "__main__":
    main()
