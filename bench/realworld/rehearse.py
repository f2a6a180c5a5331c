"""Public DDP scripts under `ddpcheck run --rehearse`: what each gets at world sizes this machine
cannot hold, and what a rehearsed rank costs.

    python bench/realworld/rehearse.py MIRRORS.json NAME [NAME ...] [--sizes 8,64,512] [--nproc 8]

Each NAME is an entry of run_scripts.json. Its files are exported at the entry's commit and its
tiny data generated exactly as bench/realworld/run.py does; then
`python -m ddpcheck run --rehearse SIZES --nproc GPUS_PER_NODE SCRIPT ARGS...` runs from the
entry's working directory, as a user would type it. Printed per entry: the exit code, the findings
(code, first world size, message) and per world size the ranks rehearsed, how they ended, the
longest time and the highest peak memory of one rehearsed rank.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as harness  # noqa: E402  (bench/realworld/run.py: export, data, environment)


def rehearse(entry: dict, mirrors: dict[str, str], sizes: str, nproc: int) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"ddpcheck-rehearse-{entry['name']}-"))
    try:
        tree = work / "tree"
        tree.mkdir()
        harness.export(mirrors[entry["repo"]], entry["commit"], entry["files"], tree)
        for i, spec in enumerate(entry.get("data", [])):
            harness.GENERATORS[spec["kind"]](tree, spec, seed=i)
        report = work / "report.json"
        target = ["-m", entry["module"]] if "module" in entry else [entry["script"]]
        cmd = [sys.executable, "-m", "ddpcheck", "run", "--rehearse", sizes, "--nproc", str(nproc), "--quiet",
               "--report", str(report), *target, *entry.get("args", [])]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=tree / entry.get("cwd", "."), env=harness.environment(entry, tree),
                              capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - started
        data = json.loads(report.read_text()) if report.exists() else {}
        print(f"== {entry['name']} ({entry['repo']}@{entry['commit'][:12]}): exit {proc.returncode}, {wall:.0f} s in all")
        for f in data.get("findings", []):
            where = f"{Path(f['path']).name}:{f['location']['line']} " if f.get("path") else ""
            print(f"   {f['code']} {where}{f['message']}")
        block = data.get("run", {}).get("rehearse", {})
        for size in block.get("sizes", []):
            statuses = ", ".join(f"{r}: {s}" for r, s in size.get("statuses", {}).items())
            print(f"   {size['world_size']:>4} ranks: {statuses}; per rank at most {size.get('seconds_per_rank') or 0:.1f} s, "
                  f"{size.get('peak_mb') or 0:.0f} MB; global batch {size.get('global_batch')}, lr {size.get('lr')}")
        if proc.returncode not in (0, 1):
            print(proc.stdout[-2000:] + proc.stderr[-2000:])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors")
    parser.add_argument("names", nargs="+")
    parser.add_argument("--sizes", default="8,64,512")
    parser.add_argument("--nproc", type=int, default=8)
    args = parser.parse_args()
    mirrors = json.loads(Path(args.mirrors).read_text())
    entries = {e["name"]: e for e in json.loads(harness.SCRIPTS.read_text())["scripts"]}
    for name in args.names:
        rehearse(entries[name], mirrors, args.sizes, args.nproc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
