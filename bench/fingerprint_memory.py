"""What the fingerprint keeps and peaks at, in a fresh process per model: VmRSS and VmHWM before
and after `fingerprints()` over the workload's parameter-shaped tensors (bench/workloads/train_ddp.py).

    python bench/fingerprint_memory.py [--models 1m,25m] [--reps 3] [--ref REF]

Each measurement is its own Python process (torch imported, the tensors made, then one call of
`fingerprints()` and a second one, as at the first and later checked steps), so the peak it adds
is not hidden under an earlier one. With `--ref REF` the same is measured, interleaved, for the
fingerprint module of git revision REF (read with `git show`, loaded from a temporary file), so a
change can be judged against its baseline in the same run. MiB, the median of --reps processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import importlib.util, json, sys
import torch
sys.path.insert(0, sys.argv[1])
from workloads.train_ddp import WIDTHS

def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return 0.0

path = sys.argv[3]
if path:
    spec = importlib.util.spec_from_file_location("fingerprint_ref", path)
    fp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fp)
else:
    from ddpcheck.run.rank import fingerprint as fp
torch.set_num_threads(1)
widths = WIDTHS[sys.argv[2]]
tensors = []
for a, b in zip(widths, widths[1:]):
    tensors += [torch.randn(b, a), torch.randn(b)]
rss0, hwm0 = status("VmRSS"), status("VmHWM")
fp.fingerprints(tensors)
rss1, hwm1 = status("VmRSS"), status("VmHWM")
fp.fingerprints(tensors)
print(json.dumps({"bytes": sum(t.numel() * t.element_size() for t in tensors),
                  "kept": rss1 - rss0, "peak": hwm1 - hwm0, "peak2": status("VmHWM") - hwm0}))
"""


def measure(model: str, ref_file: str) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(HERE), model, ref_file], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the fingerprint memory child failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="1m,25m")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ref", default=None, help="a git revision whose fingerprint module is measured too")
    args = ap.parse_args()
    versions = {"this tree": ""}
    if args.ref:
        text = subprocess.run(["git", "show", f"{args.ref}:ddpcheck/run/rank/fingerprint.py"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
        handle = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
        handle.write(text)
        handle.close()
        versions = {args.ref: handle.name, **versions}
    print(f"load at start {os.getloadavg()[0]:.1f}\n")
    print("| model | fingerprint of | tensors MiB | kept after the first call | peak of the first call "
          "| peak after a second call |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for model in args.models.split(","):
        got: dict[str, list[dict[str, float]]] = {v: [] for v in versions}
        for _ in range(args.reps):
            for label, path in versions.items():
                got[label].append(measure(model, path))
        for label, rows in got.items():
            def med(key: str) -> float:
                return statistics.median(r[key] for r in rows)
            print(f"| {model} | {label} | {rows[0]['bytes'] / 2**20:.1f} | {med('kept'):+.1f} | "
                  f"{med('peak'):+.1f} | {med('peak2'):+.1f} |")
    for path in versions.values():
        if path:
            os.unlink(path)


if __name__ == "__main__":
    main()
