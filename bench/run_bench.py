"""Runtime overhead of `ddpcheck run` against plain torchrun, measured in the same run.

    python bench/run_bench.py [--reps 1] [--quick]

For each workload (the 1 M-parameter MLP and a 25 M-parameter MLP) and 2 and 4 ranks on CPU
(gloo, OMP_NUM_THREADS=1 for every run), the same script (bench/workloads/train_ddp.py) runs
under plain torchrun, under `ddpcheck run` at its default cadence (every step for the first 20,
then every 50th), at the default cadence without the timing probe (first plan entry only: what
timing costs) and under `ddpcheck run --check-first 0 --check-every 1` (every step). The
script times its own steps after a 20-step warm-up, so "default" is the steady state past the
checked warm-up. Also measured in this process: the gradient fingerprint's throughput against
a plain `torch.sum` over the same tensors, and its cost per parameter at three sizes.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "workloads" / "train_ddp.py"


def env_for() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    env["BENCH_T0"] = repr(time.time())
    return env


def launch(mode: str, nproc: int, model: str, steps: int, out: Path, report: Path | None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    script = [str(SCRIPT), "--model", model, "--steps", str(steps), "--out", str(out)]
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
    env = env_for()
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)
             if (out / f"rank{r}.json").exists()]
    if len(ranks) != nproc:
        raise SystemExit(f"{mode} {model} x{nproc} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {
        "wall": wall,
        "exit": proc.returncode,
        "step_mean": statistics.fmean(r["step_mean_s"] for r in ranks),
        "step_median": statistics.fmean(r["step_median_s"] for r in ranks),
        "first_step": max(r["launch_to_first_step_s"] for r in ranks),
        "rss": statistics.fmean(r["maxrss_mib"] for r in ranks),
        "params": ranks[0]["params"],
        "report_bytes": report.stat().st_size if report is not None and report.exists() else None,
    }


def fingerprint_throughput(sizes=(1_000_000, 5_000_000, 25_000_000), reps: int = 5) -> list[dict]:
    """tensor_crc over a model's gradients vs a plain torch.sum over the same tensors."""
    import torch

    sys.path.insert(0, str(ROOT))
    from ddpcheck.run.rank.fingerprint import tensor_crc

    torch.set_num_threads(1)
    rows = []
    for size in sizes:
        # Gradients shaped like an MLP's: a few big matrices and their biases.
        rows_each = size * 45 // 100 // 1000
        shapes = [(rows_each, 1000), (rows_each, 1000), (size - 2 * rows_each * 1000,)]
        grads = [torch.randn(*s) for s in shapes]
        nbytes = sum(g.numel() * g.element_size() for g in grads)

        def best(fn):
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return min(times)

        t_crc = best(lambda: [tensor_crc(g) for g in grads])
        t_sum = best(lambda: [g.sum().item() for g in grads])
        rows.append({"params": sum(g.numel() for g in grads), "bytes": nbytes, "crc_s": t_crc, "sum_s": t_sum})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1, help="repetitions of each job (median reported)")
    ap.add_argument("--quick", action="store_true", help="1M model only, fewer steps (a smoke run)")
    ap.add_argument("--plan", default="1m:2:100,1m:4:100,25m:2:40,25m:4:30",
                    help="MODEL:RANKS:STEPS,... (steps timed after the 20-step warm-up)")
    ap.add_argument("--growth-steps", type=int, default=None,
                    help="steps of the report-growth pair (default: the first plan entry's)")
    args = ap.parse_args()

    plan = [(m, int(r), int(n)) for m, r, n in (item.split(":") for item in args.plan.split(","))]
    if args.quick:
        plan = [("1m", 2, 60)]
    work = Path(tempfile.mkdtemp(prefix="ddpcheck-run-bench-"))
    results: dict[tuple, dict] = {}
    for model, nproc, steps in plan:
        # The timing probe's own cost: on the plan's first entry (the 1 M-param MLP at 2 ranks).
        modes = ("torchrun", "default", "no-timing", "every-step") if (model, nproc, steps) == plan[0] \
            else ("torchrun", "default", "every-step")
        for mode in modes:
            runs = []
            for rep in range(args.reps):
                out = work / f"{model}-{nproc}-{mode}-{rep}"
                report = out / "report.json" if mode != "torchrun" else None
                runs.append(launch(mode, nproc, model, steps, out, report))
                print(f"  {model} x{nproc} {mode}: step {runs[-1]['step_mean'] * 1e3:.1f} ms, "
                      f"first step after {runs[-1]['first_step']:.2f} s, wall {runs[-1]['wall']:.1f} s, "
                      f"RSS {runs[-1]['rss']:.0f} MiB, report {runs[-1]['report_bytes']} bytes", file=sys.stderr, flush=True)
            results[(model, nproc, mode)] = {k: statistics.median([r[k] for r in runs]) if runs[0][k] is not None else None
                                            for k in runs[0]}

    # The report must not grow with the number of steps: the same job, every step checked, twice as long.
    growth = []
    g_model, g_nproc, g_steps = plan[0]
    g_steps = args.growth_steps or g_steps
    for n in (g_steps, 2 * g_steps):
        out = work / f"growth-{n}"
        growth.append((n, launch("every-step", g_nproc, g_model, n, out, out / "report.json")["report_bytes"]))
        print(f"  report after {n} checked steps: {growth[-1][1]} bytes", file=sys.stderr, flush=True)

    print(f"### Run: ddpcheck run vs plain torchrun, CPU/gloo, OMP_NUM_THREADS=1, median of {args.reps}")
    print()
    print("| workload | ranks | torchrun step ms | default cadence | overhead | every step | overhead | start-up extra s | RSS/rank torchrun MiB | extra MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model, nproc, steps in plan:
        base = results[(model, nproc, "torchrun")]
        dflt = results[(model, nproc, "default")]
        every = results[(model, nproc, "every-step")]
        print(f"| {model} ({base['params'] / 1e6:.2f} M params) | {nproc} | {base['step_mean'] * 1e3:.1f} | "
              f"{dflt['step_mean'] * 1e3:.1f} | {(dflt['step_mean'] / base['step_mean'] - 1) * 100:+.1f} % | "
              f"{every['step_mean'] * 1e3:.1f} | {(every['step_mean'] / base['step_mean'] - 1) * 100:+.1f} % | "
              f"{dflt['first_step'] - base['first_step']:+.2f} | {base['rss']:.0f} | {dflt['rss'] - base['rss']:+.0f} |")
    print()
    print("Per-check cost (every-step minus torchrun, ms per step) per million parameters, and report size:")
    print()
    print("| workload | ranks | check cost ms | ms per M params | report bytes (default) | report bytes (every step) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for model, nproc, steps in plan:
        base = results[(model, nproc, "torchrun")]
        every = results[(model, nproc, "every-step")]
        dflt = results[(model, nproc, "default")]
        cost = (every["step_mean"] - base["step_mean"]) * 1e3
        print(f"| {model} | {nproc} | {cost:.2f} | {cost / (base['params'] / 1e6):.3f} | {dflt['report_bytes']} | {every['report_bytes']} |")
    print()
    print(f"Report size with every step checked ({g_model}, {g_nproc} ranks): "
          + ", ".join(f"{n} steps: {b} bytes" for n, b in growth) + ".")
    print()
    t_model, t_nproc, _ = plan[0]
    with_t, without = results[(t_model, t_nproc, "default")], results[(t_model, t_nproc, "no-timing")]
    print(f"Timing probe (per-rank phases; DDP140-DDP143) at the default cadence, {t_model} x{t_nproc}: "
          f"step {with_t['step_mean'] * 1e3:.2f} ms with it, {without['step_mean'] * 1e3:.2f} ms without "
          f"({(with_t['step_mean'] / without['step_mean'] - 1) * 100:+.1f} %).")
    print()
    fp = fingerprint_throughput()
    print("Gradient fingerprint (ddpcheck.run.rank.fingerprint.tensor_crc) vs torch.sum over the same tensors, one thread, best of 5:")
    print()
    print("| params | MB | fingerprint ms | GB/s | torch.sum ms | GB/s | fingerprint / sum throughput | fingerprint ns per param |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in fp:
        print(f"| {r['params'] / 1e6:.1f} M | {r['bytes'] / 1e6:.0f} | {r['crc_s'] * 1e3:.2f} | {r['bytes'] / r['crc_s'] / 1e9:.2f} | "
              f"{r['sum_s'] * 1e3:.2f} | {r['bytes'] / r['sum_s'] / 1e9:.2f} | {r['sum_s'] / r['crc_s'] * 100:.0f} % | "
              f"{r['crc_s'] / r['params'] * 1e9:.2f} |")


if __name__ == "__main__":
    main()
