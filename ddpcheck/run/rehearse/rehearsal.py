"""`ddpcheck run --rehearse 8,64,512 [--nproc GPUS_PER_NODE] SCRIPT ...`: the job at world sizes this
machine cannot hold as processes, rehearsed one representative rank per process, each alone.

    sizes → for each world size, its representative ranks (plan.py), one process each (runner.py),
            several at once (one per CPU, as many as memory holds), reported in order
          → judge (judge.py): findings with the first world size each appears at
          → table, JSON (`run.rehearse`), HTML (report.py)

Rank 0 of a one-rank world runs first, as the baseline the learning rate is compared with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ddpcheck.errors import UserError
from ddpcheck.run.launcher import memory
from ddpcheck.run.rehearse import judge, plan, report, runner

ENV_JOBS = "DDPCHECK_REHEARSE_JOBS"  # how many ranks run at once (1: one after another); default: CPUs and memory
P = TypeVar("P")
R = TypeVar("R")


def run(launch: Any, argv: list[str]) -> int:
    options = launch.options
    nproc = launch.nproc
    if launch.target.kind == "script":
        from ddpcheck.run.launcher.plan import find_spawn

        site = find_spawn(launch.target.name)
        if site is not None:
            raise UserError(f"ddpcheck run: --rehearse: {os.path.basename(site.path)}:{site.line} starts its own "
                            f"workers ({site.call}); a rehearsal runs torchrun-style ranks, each alone. "
                            "Rehearse the function each worker runs from a script that reads RANK, WORLD_SIZE "
                            "and LOCAL_RANK")
    sizes = list(options.rehearse)
    keep = bool(os.environ.get("DDPCHECK_KEEP_RECORDS"))
    # A rank makes no progress for twice --hang-timeout (60 s by default): blocked. Start-up and
    # the first steps of a large model fit in that on a CPU; a hang-timeout of 0 keeps the default.
    limits = {"time_limit": 2 * options.hang_timeout if options.hang_timeout > 0 else runner.LIMITS["time_limit"]}
    worlds = ([1] if 1 not in sizes else []) + sizes
    record_dirs = {world: tempfile.mkdtemp(prefix=f"ddpcheck-rehearse-{world}-") for world in worlds}
    places = [plan.Placement(rank, world, nproc) for world in worlds for rank in plan.representatives(world, nproc)]
    live = runner.LiveRanks()

    def rehearse(placement: plan.Placement) -> runner.RankRun:
        return runner.run_rank(launch.target, options, placement, nproc, record_dirs[placement.world_size],
                               limits, live)

    def started(done: int, placement: plan.Placement) -> None:
        _say(options, f"--rehearse: world size {placement.world_size}, rank {placement.rank} (node {placement.node}, "
             f"local rank {placement.local_rank}) [{done}/{len(places)}]")

    def ended(result: runner.RankRun) -> None:
        _say(options, f"--rehearse:   {result.status}"
             + (f" ({result.stopped})" if result.stopped else "")
             + f", {result.seconds:.1f} s, {result.peak_mb or 0:.0f} MB peak")

    runs: dict[int, list[runner.RankRun]] = {}
    try:
        for result in in_order(places, rehearse, started, ended, _slots, live.stop,
                               alone=lambda result: result.status == "blocked"):
            runs.setdefault(result.world_size, []).append(result)
    finally:
        for world in worlds:
            if keep:
                print(f"ddpcheck: rehearsal records kept in {record_dirs[world]}", file=sys.stderr)
            else:
                shutil.rmtree(record_dirs[world], ignore_errors=True)
    verdict = judge.judge(runs, sizes, nproc)
    return report.present(verdict, runs, launch, argv)


def in_order(places: list[P], rehearse: Callable[[P], R], started: Callable[[int, P], None],
             ended: Callable[[R], None], slots: Callable[[R], int], stop: Callable[[], None],
             alone: Callable[[R], bool] = lambda result: False) -> list[R]:
    """Rehearse every place, and return the results in the order of `places`.

    The first place runs alone, before any other: it is the one-rank baseline, what it measures
    (`slots(first result)`) bounds how many of the others run at once, and whatever a script
    prepares once (a dataset it downloads outside the working directory) is there before the other
    ranks start, as when every rank ran after it. The others start in order, at most that many at a
    time. A result that `alone` says must not depend on its neighbours (a rank past its time limit:
    ranks beside it slowed it down) and that had any is rehearsed again with nothing beside it, and
    that result counts. Each rank's progress line and result line are printed in the order of
    `places`, as they were when the ranks ran one after another; `stop` kills what runs when the
    rehearsal is stopped."""
    if not places:
        return []
    started(1, places[0])
    results = [rehearse(places[0])]
    ended(results[0])
    rest = places[1:]
    if not rest:
        return results
    gate = _Gate(max(1, min(slots(results[0]), len(rest))))

    def gated(index: int, place: P) -> R:
        gate.enter(index)
        try:
            return rehearse(place)
        finally:
            gate.leave(index)

    pool = ThreadPoolExecutor(max_workers=gate.slots, thread_name_prefix="ddpcheck-rehearse")
    try:
        futures = [pool.submit(gated, i, place) for i, place in enumerate(rest)]
        for i, (place, future) in enumerate(zip(rest, futures)):
            started(i + 2, place)
            result = future.result()
            if alone(result) and gate.had_neighbours(i):
                with gate.alone():
                    result = rehearse(place)
            results.append(result)
            ended(result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        gate.stop()
        stop()
        raise
    finally:
        pool.shutdown(wait=True)
    return results


class _Gate:
    """Lets places start in their order, at most `slots` at a time, pauses every start while one
    place runs alone, and remembers which places ran while another one was running."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._cond = threading.Condition()
        self._running: set[int] = set()
        self._next = 0
        self._paused = False
        self._stopped = False
        self._neighbours: set[int] = set()

    def enter(self, index: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or (index == self._next and not self._paused
                                                         and len(self._running) < self.slots))
            if self._stopped:
                raise runner.Stopped()
            self._next += 1
            if self._running:
                self._neighbours.update(self._running | {index})
            self._running.add(index)

    def leave(self, index: int) -> None:
        with self._cond:
            self._running.discard(index)
            self._cond.notify_all()

    def had_neighbours(self, index: int) -> bool:
        with self._cond:
            return index in self._neighbours

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._paused = True
            self._cond.wait_for(lambda: not self._running)
        try:
            yield
        finally:
            with self._cond:
                self._paused = False
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


RANK_MB_FLOOR = 512.0  # a rank that imports torch; the baseline's own peak when it is larger


def _slots(baseline: runner.RankRun) -> int:
    jobs = os.environ.get(ENV_JOBS, "").strip()
    if jobs.isdigit() and int(jobs) > 0:
        return int(jobs)
    return parallel_ranks(_cpus(), memory.available_mib(), baseline.peak_mb)


def parallel_ranks(cpus: int, available_mb: float | None, rank_mb: float | None) -> int:
    """How many rehearsed ranks run at once: one per CPU (a rank is one busy thread:
    OMP_NUM_THREADS=1), as many as the free memory holds at the baseline rank's peak, at least one."""
    per_rank = max(rank_mb or 0.0, RANK_MB_FLOOR)
    by_memory = int(available_mb // per_rank) if available_mb is not None else cpus
    return max(1, min(cpus, by_memory))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use (a container's share)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _say(options: Any, message: str) -> None:
    if not options.quiet:
        print(f"ddpcheck: {message}", file=sys.stderr, flush=True)
