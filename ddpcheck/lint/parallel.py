"""Lint files in worker processes (`-j N`): each worker lints whole files and returns findings.

Workers are forked from the CLI process, so they start with ddpcheck and libcst already
imported; each keeps its own Project (lint/model/project.py) (helper modules parsed once per worker, not per file).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpcheck.findings import Finding

if TYPE_CHECKING:
    from ddpcheck.lint.model import Project

FILES_PER_WORKER = 8  # below this a worker costs more to start than it saves


@dataclass(frozen=True)
class Job:
    display: str  # the path as reported
    path: str
    source: str
    codes: frozenset[str]  # the rules enabled for this file
    syntax: bool  # whether a syntax error is reported


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def idle_cpus() -> int:
    """CPUs nobody else is using now: ours less the 1-minute load average. On a shared or busy
    machine extra workers only queue for the same cores (measured: -j2 no faster than -j1 on
    two loaded cores), so they are not started unless asked for."""
    cpus = available_cpus()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cpus
    return max(1, int(cpus - load + 0.5))


def worker_count(requested: int | None, files: int) -> int:
    """`-j N` as asked (never more workers than files); without it, one per idle CPU when there
    is enough work to pay for starting them."""
    if requested is not None:
        return max(1, min(requested, files))
    return max(1, min(idle_cpus(), files // FILES_PER_WORKER))


@dataclass(frozen=True)
class Failure:
    """ddpcheck failed on the job's file (a bug of ours): what was raised, and the traceback
    formatted where it happened (a worker's traceback does not survive the way back)."""

    kind: str
    text: str
    trace: str


def lint_jobs(jobs: list[Job], workers: int) -> list[list[Finding] | Failure]:
    """Findings per job, in the order of `jobs`; a Failure for a file ddpcheck failed on."""
    # What is loaded by now (libcst, the rules, the configuration) lives as long as the run: the
    # collections after each file (_settle) need not walk it, here nor in a forked worker.
    gc.freeze()
    try:
        return _lint_all(jobs, workers)
    finally:
        gc.unfreeze()  # a caller in this process (a test, an editor) gets its collector as it was


def _lint_all(jobs: list[Job], workers: int) -> list[list[Finding] | Failure]:
    if workers <= 1 or len(jobs) <= 1:
        return [_lint(job) for job in jobs]
    import multiprocessing  # only here: a one-file run should not pay for importing it
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    # A few chunks per worker: even load without paying a round trip per file.
    chunksize = max(1, len(jobs) // (workers * 4))
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(_lint, jobs, chunksize=chunksize))


_facts = None  # this process's Project, created on first use
_dropped = 0  # _facts.dropped at this process's last full collection
# Module models let go of since the last full collection before the next one (the run keeps up
# to 512; this is about when CPython's own rule would collect everything with that many kept).
_COLLECT_AFTER = 128


def _lint(job: Job) -> list[Finding] | Failure:
    """The job's findings before `# noqa` (the caller settles them: a directive in one file may
    be used by a finding another file's lint shows there). One file's failure is that file's
    alone: the other files of the run (and of this worker) are still linted."""
    try:
        return _findings(job)
    except Exception as err:  # noqa: BLE001 — a bug of ours, reported for this file
        import traceback

        return Failure(type(err).__name__, str(err), "".join(traceback.format_exception(err)))


def _findings(job: Job) -> list[Finding]:
    global _facts
    from ddpcheck.lint.engine import lint_source
    from ddpcheck.lint.model import Project
    from ddpcheck.lint.rules import rule_classes
    from ddpcheck.tool_codes import SyntaxErrorInFile

    if _facts is None:
        _facts = Project()
    rules = [r for r in rule_classes() if r.code in job.codes]
    findings = lint_source(job.display, job.source, rules, _facts, noqa=False, freeze_tree=True)
    _settle(_facts)
    if not job.syntax:
        findings = [f for f in findings if f.code != SyntaxErrorInFile.code]
    return findings


def _settle(project: Project) -> None:
    """Collect the file's cyclic garbage, then freeze what is left: the objects that outlive a
    file are the run's (the models the project keeps, its caches), and the collector's older
    generations would otherwise walk all of them again and again (≈ 7 % of a 200-file lint's CPU).
    lint_source collects nothing while it runs, so the file's objects are all in the youngest
    generation. Models the project lets go of are garbage the freeze hides: once enough have been
    dropped, everything is collected once and frozen again."""
    global _dropped
    gc.collect(0)
    if project.dropped - _dropped >= _COLLECT_AFTER:
        gc.unfreeze()
        gc.collect()
        _dropped = project.dropped
    gc.freeze()
