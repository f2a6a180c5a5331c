"""What one `ddpcheck lint --no-cache FILE` costs beyond the libcst floor, and where it goes.

    python bench/import_cost.py [--reps 5] [--file F] [--checkout DIR ...]

For each checkout (default: this one) it takes, in the same run and interleaved so that load
hits every row alike: the wall and CPU time of `python -c "import libcst; parse FILE"` (the
floor) and of `python -m ddpcheck lint --no-cache FILE`, medians of `--reps`; then one
`python -X importtime` of the lint, summed by package (self time, microseconds), and the
ddpcheck modules with the largest cumulative time. Modules imported with
`importlib.import_module` (the rule modules, found by discovery) are not shown by -X importtime;
their cost is the `rules` row, timed directly.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLOOR = "import sys, libcst; libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())"
RULES = ("import time, ddpcheck.lint.rule as r; t = time.perf_counter(); "
         "from ddpcheck.lint.rules import rule_classes; rule_classes(); "
         "print(int((time.perf_counter() - t) * 1e6))")
SAMPLE = '''\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Linear(10, 10).cuda(local_rank), device_ids=[local_rank])
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "ckpt.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def env_for(checkout: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout), NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    # An installed ddpcheck has its bytecode compiled (pip does it); without that every run
    # would compile every module from source, which is not what users pay.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_checkout(checkout: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "ddpcheck")],
                   env=env_for(checkout), check=True, stdout=subprocess.DEVNULL)


_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def import_tree(checkout: Path, file: Path) -> tuple[dict[str, int], list[tuple[str, int]]]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddpcheck", "lint", "--no-cache", str(file)],
                         env=env_for(checkout), cwd=file.parent, capture_output=True, text=True)
    groups: dict[str, int] = defaultdict(int)
    ours: list[tuple[str, int]] = []
    for m in _LINE.finditer(out.stderr):
        self_us, cumulative, name = int(m.group(1)), int(m.group(2)), m.group(4)
        top = name.split(".")[0]
        group = {"libcst_native": "libcst", "_distutils_hack": "(site)", "sitecustomize": "(site)"}.get(top, top)
        if group not in ("libcst", "ddpcheck", "typer", "click", "pydantic", "pydantic_core", "rich",
                         "annotated_types", "typing_extensions", "(site)"):
            group = "stdlib"
        groups[group] += self_us
        if top == "ddpcheck":
            ours.append((name, cumulative))
    rules = subprocess.run([sys.executable, "-c", RULES], env=env_for(checkout), capture_output=True, text=True)
    groups["ddpcheck rules (importlib)"] = int(rules.stdout.strip() or 0)
    return dict(groups), sorted(ours, key=lambda item: -item[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--file", type=Path, help="the file to lint (default: a 30-line DDP script)")
    ap.add_argument("--checkout", type=Path, action="append",
                    help="a ddpcheck checkout to measure (repeat to compare; default: this one)")
    args = ap.parse_args()
    checkouts = [c.resolve() for c in (args.checkout or [HERE.parent])]
    for c in checkouts:
        compile_checkout(c)
    work = Path(tempfile.mkdtemp(prefix="ddpcheck-import-"))
    file = args.file.resolve() if args.file else work / "train.py"
    if not args.file:
        file.write_text(SAMPLE)
    floor: list[tuple[float, float]] = []
    lint: dict[Path, list[tuple[float, float]]] = {c: [] for c in checkouts}
    for _ in range(args.reps):  # interleaved: a burst of load hits every row
        floor.append(timed([sys.executable, "-c", FLOOR, str(file)], env_for(checkouts[0]), work))
        for c in checkouts:
            lint[c].append(timed([sys.executable, "-m", "ddpcheck", "lint", "--no-cache", str(file)], env_for(c), work))
    fw = statistics.median(w for w, _ in floor)
    fc = statistics.median(c for _, c in floor)
    load = os.getloadavg()[0]
    print(f"file: {file.name} ({len(file.read_text().splitlines())} lines); median of {args.reps}; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print()
    print("| run | wall s | CPU s | wall / floor | CPU / floor |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| python + import libcst + parse (floor) | {fw:.3f} | {fc:.3f} | 1.00x | 1.00x |")
    for c in checkouts:
        w = statistics.median(x for x, _ in lint[c])
        u = statistics.median(x for _, x in lint[c])
        print(f"| ddpcheck lint --no-cache ({c.name}) | {w:.3f} | {u:.3f} | {w / fw:.2f}x | {u / fc:.2f}x |")
    for c in checkouts:
        groups, ours = import_tree(c, file)
        print()
        print(f"Import self time by package, ms ({c.name}; one `-X importtime` run):")
        print()
        print("| package | ms |")
        print("| --- | ---: |")
        for name, us in sorted(groups.items(), key=lambda item: -item[1]):
            print(f"| {name} | {us / 1000:.0f} |")
        print()
        print("Largest ddpcheck modules (cumulative ms, children included):", ", ".join(
            f"{name} {us / 1000:.0f}" for name, us in ours[:8]))


if __name__ == "__main__":
    main()
