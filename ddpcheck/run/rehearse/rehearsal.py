"""`ddpcheck run --rehearse 8,64,512 [--nproc GPUS_PER_NODE] SCRIPT ...`: the job at world sizes this
machine cannot hold as processes, rehearsed one representative rank at a time.

    sizes → for each world size, its representative ranks (plan.py), one process each (runner.py)
          → judge (judge.py): findings with the first world size each appears at
          → table, JSON (`run.rehearse`), HTML (report.py)

Rank 0 of a one-rank world runs first, as the baseline the learning rate is compared with.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

from ddpcheck.errors import UserError
from ddpcheck.run.rehearse import judge, plan, report, runner


def run(launch: Any, argv: list[str]) -> int:
    options = launch.options
    nproc = launch.nproc
    if launch.target.kind == "script":
        from ddpcheck.run.launcher.plan import find_spawn

        site = find_spawn(launch.target.name)
        if site is not None:
            raise UserError(f"ddpcheck run: --rehearse: {os.path.basename(site.path)}:{site.line} starts its own "
                            f"workers ({site.call}); a rehearsal runs one torchrun-style rank at a time. "
                            "Rehearse the function each worker runs from a script that reads RANK, WORLD_SIZE "
                            "and LOCAL_RANK")
    sizes = list(options.rehearse)
    runs: dict[int, list[runner.RankRun]] = {}
    keep = bool(os.environ.get("DDPCHECK_KEEP_RECORDS"))
    total = sum(len(plan.representatives(w, nproc)) for w in sizes) + (0 if 1 in sizes else 1)
    done = 0
    # A rank makes no progress for twice --hang-timeout (60 s by default): blocked. Start-up and
    # the first steps of a large model fit in that on a CPU; a hang-timeout of 0 keeps the default.
    limits = {"time_limit": 2 * options.hang_timeout if options.hang_timeout > 0 else runner.LIMITS["time_limit"]}
    for world in ([1] if 1 not in sizes else []) + sizes:
        record_dir = tempfile.mkdtemp(prefix=f"ddpcheck-rehearse-{world}-")
        try:
            for rank in plan.representatives(world, nproc):
                done += 1
                placement = plan.Placement(rank, world, nproc)
                _say(options, f"--rehearse: world size {world}, rank {rank} (node {placement.node}, "
                     f"local rank {placement.local_rank}) [{done}/{total}]")
                result = runner.run_rank(launch.target, options, placement, nproc, record_dir, limits)
                runs.setdefault(world, []).append(result)
                _say(options, f"--rehearse:   {result.status}"
                     + (f" ({result.stopped})" if result.stopped else "")
                     + f", {result.seconds:.1f} s, {result.peak_mb or 0:.0f} MB peak")
        finally:
            if keep:
                print(f"ddpcheck: rehearsal records kept in {record_dir}", file=sys.stderr)
            else:
                shutil.rmtree(record_dir, ignore_errors=True)
    verdict = judge.judge(runs, sizes, nproc)
    return report.present(verdict, runs, launch, argv)


def _say(options: Any, message: str) -> None:
    if not options.quiet:
        print(f"ddpcheck: {message}", file=sys.stderr, flush=True)
