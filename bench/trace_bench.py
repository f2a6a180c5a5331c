"""How `ddpcheck trace` scales with the number of ranks' dumps.

    python bench/trace_bench.py [--ranks 4 64 256 1024] [--calls 2000] [--reps 3]

Synthetic dump sets made from a real one (tests/trace/data/early_stop: a 2-rank gloo job whose
rank 0 left the loop early): every rank of an N-rank set gets rank 1's recorded calls, repeated
with rising sequence ids up to --calls per rank (2000: the recorder's default buffer, full), the
group lists all N ranks, and the last rank stops one call short, so each set holds a DDP129 divergence
at the end of every rank's history (the worst case: every call is compared). Each row is one
`python -m ddpcheck trace --no-causes DIR --output-format json` process (starting Python
included): wall time and CPU time (user + system, os.wait4; steadier on a shared machine),
medians of --reps; the verdict is checked on every run. The figure that
matters is the time each added rank costs (the slope between rows: linear scaling keeps it flat)
and the 4-rank row against the one-second target.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "trace" / "data" / "early_stop" / "rank_1"


def write_set(folder: Path, world: int, calls: int) -> None:
    dump = pickle.loads(REAL.read_bytes())
    config = next(iter(dump["pg_config"].values()))
    config["ranks"] = str(list(range(world)))
    recorded = dump["entries"]
    dump["entries"] = [dict(recorded[i % len(recorded)], collective_seq_id=i + 1, record_id=i)
                       for i in range(max(calls, len(recorded)))]
    full = pickle.dumps(dump)
    dump["entries"] = dump["entries"][:-1]
    short = pickle.dumps(dump)
    for rank in range(world):
        (folder / f"rank_{rank}").write_bytes(short if rank == world - 1 else full)


def one_run(folder: Path) -> tuple[float, float]:
    """(wall, CPU = user + system from os.wait4) of one trace process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ddpcheck", "trace", "--no-causes", str(folder),
                             "--output-format", "json", "-o", str(folder / "report.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    codes = [f["code"] for f in json.loads((folder / "report.json").read_text())["findings"]]
    (folder / "report.json").unlink()
    if code != 1 or codes != ["DDP129"]:
        raise SystemExit(f"unexpected verdict on {folder}: exit {code}, {codes}")
    return elapsed, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 64, 256, 1024])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(f"| ranks | calls per rank | wall (s) | CPU (s) | CPU ms per added rank (slope from the row above) |")
    print("|---:|---:|---:|---:|---:|")
    previous: tuple[int, float] | None = None
    for world in args.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_set(folder, world, args.calls)
            runs = [one_run(folder) for _ in range(args.reps)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        slope = "" if previous is None else f"{(cpu - previous[1]) / (world - previous[0]) * 1000:.1f}"
        print(f"| {world} | {args.calls} | {wall:.2f} | {cpu:.2f} | {slope} |", flush=True)
        previous = (world, cpu)


if __name__ == "__main__":
    main()
