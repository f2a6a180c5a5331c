"""Lint throughput: ddpcheck against libcst's own floor and TorchFix, measured in the same run.

    python bench/lint_bench.py [--reps 3] [--torchfix PATH] [--keep DIR]

Every row is a separate process; its CPU time (user + system, from `os.wait4`, so worker
processes count too) and wall time are taken, the median of `--reps` repetitions is reported.
The machine is shared and noisy, so targets are ratios against baselines of the same run. Every
row includes starting Python and importing libcst (the `start-up` row shows that part).

TorchFix 0.7.0 lives in its own environment (it pins libcst < 1.6); see bench/README.md. When
it is missing its row says so and the rest runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from corpus import write_corpus, write_real_project  # noqa: E402

sys.path.insert(0, str(ROOT))
from ddpcheck.lint.parallel import worker_count  # noqa: E402  (what the default -j picks now)

DEFAULT_TORCHFIX = HERE / ".venv-torchfix" / "bin" / "torchfix"
# The floor for linting one file with any libcst tool: start Python, import libcst, parse it.
ONE_FILE_FLOOR = "import sys, libcst; libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())"


def measure(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float]:
    """(CPU seconds of the process and everything it waited for, wall seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd[:6])} ...\n{err[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def median_of(reps: int, cmd: list[str], cwd: Path, env: dict | None = None, prepare=None) -> tuple[float, float]:
    cpus, walls = [], []
    for _ in range(reps):
        if prepare is not None:
            prepare()
        cpu, wall = measure(cmd, cwd, env)
        cpus.append(cpu)
        walls.append(wall)
    return statistics.median(cpus), statistics.median(walls)


def ddpcheck_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("DDPCHECK_CACHE_DIR", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users run compiled bytecode (pip compiles at install)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per row (median reported)")
    ap.add_argument("--torchfix", type=Path, default=DEFAULT_TORCHFIX, help="the torchfix executable")
    ap.add_argument("--keep", type=Path, help="write the corpus here and keep it")
    ap.add_argument("--files", type=int, default=None, help="use only the first N DDP scripts (a loaded machine)")
    args = ap.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="ddpcheck-bench-"))
    if work.exists() and args.keep:
        shutil.rmtree(work)
    ddp, mixed = write_corpus(work)
    if args.files:
        scripts = [p for p in ddp if p.name.startswith("train_")][: args.files]
        ddp = scripts + [p for p in ddp if not p.name.startswith("train_")]
    py = sys.executable
    env = ddpcheck_env()
    lines = sum(len(p.read_text().splitlines()) for p in ddp)
    ddp_names = [str(p.relative_to(work / "ddp")) for p in ddp]
    mixed_names = [str(p.relative_to(work / "mixed")) for p in mixed]
    torchy = sum("torch" in p.read_text() for p in mixed)
    base = [py, str(HERE / "baselines.py")]
    lint = [py, "-m", "ddpcheck", "lint", "--output-format", "concise"]
    reps = args.reps
    cache_dir = work / "ddp" / ".ddpcheck_cache"

    def clear_cache():
        shutil.rmtree(cache_dir, ignore_errors=True)

    rows: dict[str, tuple[float, float]] = {}
    loads: dict[str, float] = {}  # the 1-minute load average when each row started
    print(f"corpus: {len(ddp)} DDP files ({lines} lines); mixed tree: {len(mixed)} files, {torchy} mention torch", flush=True)

    def row(name, cmd, cwd, **kw):
        loads[name] = os.getloadavg()[0]
        rows[name] = median_of(reps, cmd, cwd, **kw)
        print(f"  {name}: {rows[name][0]:.2f} s CPU, {rows[name][1]:.2f} s wall (load {loads[name]:.1f})",
              file=sys.stderr, flush=True)

    ddp_dir = work / "ddp"
    row("start-up (python + import libcst)", base + ["noop"], ddp_dir)
    row("ast.parse + ast.walk", base + ["ast", *ddp_names], ddp_dir)
    row("libcst parse", base + ["parse", *ddp_names], ddp_dir)
    row("libcst parse + CSTVisitor traversal", base + ["parse_visit", *ddp_names], ddp_dir)
    row("libcst parse + PositionProvider", base + ["parse_positions", *ddp_names], ddp_dir)
    row("ddpcheck lint --no-cache -j1", lint + ["--no-cache", "-j1", *ddp_names], ddp_dir, env=env)
    row("ddpcheck lint --no-cache -j2", lint + ["--no-cache", "-j2", *ddp_names], ddp_dir, env=env)
    default_workers = worker_count(None, len(ddp_names))
    row(f"ddpcheck lint --no-cache (default -j: {default_workers} worker(s) at this load)",
        lint + ["--no-cache", *ddp_names], ddp_dir, env=env)
    row("ddpcheck lint (cold cache)", lint + ddp_names, ddp_dir, env=env, prepare=clear_cache)
    row("ddpcheck lint (unchanged re-run, cached)", lint + ddp_names, ddp_dir, env=env)
    tf = args.torchfix
    torchfix_note = ""
    if tf.exists():
        row("TorchFix 0.7.0 -j1", [str(tf), "-j", "1", *ddp_names], ddp_dir)
    else:
        torchfix_note = f"TorchFix not measured: {tf} is missing (see bench/README.md)."
    mixed_dir = work / "mixed"
    row("mixed: libcst parse of every file", base + ["parse", *mixed_names], mixed_dir)
    row("mixed: ddpcheck lint --no-cache -j1", lint + ["--no-cache", "-j1", "."], mixed_dir, env=env)
    real_dir = work / "real"
    script, needed, imported = write_real_project(real_dir)
    rel = [str(p.relative_to(real_dir)) for p in (script, *needed)]
    rel_all = [str(p.relative_to(real_dir)) for p in (script, *imported)]
    real_lines = sum(len(p.read_text().splitlines()) for p in (script, *imported))
    row("real: libcst parse (script + the modules a DDP review needs)", base + ["parse", *rel], real_dir)
    row("real: libcst parse (script + every module it imports)", base + ["parse", *rel_all], real_dir)
    row("real: ddpcheck lint --no-cache train.py", lint + ["--no-cache", "train.py"], real_dir, env=env)
    one = ddp_names[1]
    row("one file: python -c pass", [py, "-c", "pass"], ddp_dir)
    row("one file: python + import libcst + parse", [py, "-c", ONE_FILE_FLOOR, one], ddp_dir)
    row("one file: ddpcheck lint --no-cache", lint + ["--no-cache", one], ddp_dir, env=env)
    row("one file: python -c 'import ddpcheck.cli'", [py, "-c", "import ddpcheck.cli"], ddp_dir, env=env)

    parse = rows["libcst parse"][0]
    start = rows["start-up (python + import libcst)"][0]
    print()
    print(f"### Lint: {len(ddp)} DDP scripts ({lines} lines), median of {reps}, CPU = user+sys of the process and its workers")
    print()
    print(f"{os.cpu_count()} CPUs; load = the 1-minute load average when the row started")
    print()
    print("| run | CPU s | wall s | CPU / libcst parse | load |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (cpu, wall) in rows.items():
        ratio = f"{cpu / parse:.2f}x" if not name.startswith(("mixed", "one file", "real")) else ""
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {ratio} | {loads[name]:.1f} |")
    print()
    ours = rows["ddpcheck lint --no-cache -j1"]
    j2 = rows["ddpcheck lint --no-cache -j2"]
    cached = rows["ddpcheck lint (unchanged re-run, cached)"]
    single = rows["one file: ddpcheck lint --no-cache"]
    mixed_ours = rows["mixed: ddpcheck lint --no-cache -j1"]
    mixed_parse = rows["mixed: libcst parse of every file"]
    print("| target | measured | goal | met |")
    print("| --- | ---: | ---: | :---: |")

    def target(name, value, goal, ok):
        print(f"| {name} | {value} | {goal} | {'yes' if ok else 'NO'} |")

    r = ours[0] / parse
    target("ddpcheck CPU / libcst parse (DDP corpus, -j1)", f"{r:.2f}x", "<= 2.5x", r <= 2.5)
    net = (ours[0] - start) / max(1e-9, parse - start)
    print(f"| same, start-up subtracted from both | {net:.2f}x | (for reference) | |")
    if "TorchFix 0.7.0 -j1" in rows:
        s = rows["TorchFix 0.7.0 -j1"][0] / ours[0]
        target("TorchFix CPU / ddpcheck CPU", f"{s:.1f}x", ">= 10x", s >= 10)
    sp = ours[1] / j2[1]
    target(f"-j2 wall speed-up over -j1 ({len(ddp_names)} files; meaningful on 2 idle cores, "
           f"load here {loads['ddpcheck lint --no-cache -j2']:.1f})", f"{sp:.2f}x", ">= 1.6x", sp >= 1.6)
    target("unchanged re-run, cached (wall)", f"{cached[1]:.2f} s ({cached[0]:.2f} s CPU)", "<= 0.3 s", cached[1] <= 0.3)
    floor = rows["one file: python + import libcst + parse"]
    r1 = single[1] / floor[1]
    target("one file, wall: ddpcheck lint --no-cache / (python + import libcst + parse)",
           f"{r1:.2f}x ({single[1]:.2f} s vs {floor[1]:.2f} s)", "<= 1.3x", r1 <= 1.3)
    real = rows["real: ddpcheck lint --no-cache train.py"][0]
    needed_parse = rows["real: libcst parse (script + the modules a DDP review needs)"][0]
    all_parse = rows["real: libcst parse (script + every module it imports)"][0]
    rr = real / needed_parse
    target(f"real script ({len(script.read_text().splitlines())} lines, 10 project modules, {real_lines} lines in all): "
           "ddpcheck CPU / parse of the script + the modules it needs", f"{rr:.2f}x", "<= 2x", rr <= 2)
    print(f"| same, against parsing the script + every module it imports | {real / all_parse:.2f}x | (for reference) | |")
    m = mixed_ours[0] / mixed_parse[0]
    target("mixed tree: ddpcheck CPU / parsing every file", f"{m:.2f}x", "< 1 (pre-filter)", m < 1)
    if torchfix_note:
        print()
        print(torchfix_note)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
