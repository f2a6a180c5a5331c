"""Lint CPU against the libcst parse, for several checkouts side by side (an A/B of a change).

    python bench/lint_ab.py [--files 60] [--reps 5] CHECKOUT [CHECKOUT ...]

Writes the bench corpus (bench/corpus.py) to a temporary folder, then repeats: the parse floor
(`bench/baselines.py parse` over the first `--files` DDP scripts and the helper package), and
`python -m ddpcheck lint --no-cache -j1` over the same files with each checkout on PYTHONPATH,
the checkouts' order alternating from one repetition to the next. CPU = user + system of each
process (os.wait4); each lint row is divided by the parse of its own repetition, and the
median and range of those ratios are printed with the load average of every repetition. A
checkout is a folder holding the `ddpcheck` package (`git archive REV ddpcheck | tar -x -C DIR`
gives an old one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import write_corpus  # noqa: E402


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> float:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"failed: {' '.join(cmd[:5])} ...\n{proc.stderr.read().decode(errors='replace') if proc.stderr else ''}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=60, help="the first N DDP scripts of the corpus")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("checkouts", nargs="+", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddpcheck-ab-"))
    ddp, _ = write_corpus(work)
    scripts = [p for p in ddp if p.name.startswith("train_")][: args.files]
    files = scripts + [p for p in ddp if not p.name.startswith("train_")]
    names = [str(p.relative_to(work / "ddp")) for p in files]
    cwd = work / "ddp"
    py = sys.executable
    checkouts = [c.resolve() for c in args.checkouts]

    def env(checkout: Path) -> dict:
        e = dict(os.environ, PYTHONPATH=str(checkout))
        e.pop("PYTHONDONTWRITEBYTECODE", None)  # users run compiled bytecode
        return e

    lint = [py, "-m", "ddpcheck", "lint", "--no-cache", "-j1", "--output-format", "concise"]
    for c in checkouts:
        run(lint + names[:1], cwd, env(c))  # compile the checkout's bytecode first
    ratios: dict[Path, list[float]] = {c: [] for c in checkouts}
    print(f"{len(scripts)} DDP scripts + {len(files) - len(scripts)} helper files; {os.cpu_count()} CPUs")
    for rep in range(args.reps):
        load = os.getloadavg()[0]
        parse = run([py, str(HERE / "baselines.py"), "parse", *names], cwd)
        line = f"rep {rep}: load {load:.1f}, parse {parse:.2f} s"
        for c in checkouts if rep % 2 == 0 else checkouts[::-1]:
            cpu = run(lint + names, cwd, env(c))
            ratios[c].append(cpu / parse)
            line += f" | {c.name} {cpu:.2f} s ({cpu / parse:.2f}x)"
        print(line, flush=True)
    for c in checkouts:
        r = ratios[c]
        print(f"{c}: lint CPU / parse median {statistics.median(r):.2f}x (range {min(r):.2f}-{max(r):.2f}x)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
