"""`ddpcheck run --scaling 1,2,4 SCRIPT ...`: the job once at each world size on this node, then the
comparison (ddpcheck/run/launcher/scaling.py). The report is the largest run's, with a `scaling` block and
the learning-rate verdict (DDP143) added; every run is checked as usual."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from typing import Any

from ddpcheck.findings import Finding, Severity
from ddpcheck.report.json_format import document
from ddpcheck.run.verdict import FAIL


def run(argv: list[str], options: Any) -> int:
    runs: list[dict[str, Any]] = []
    outcomes: dict[int, Any] = {}
    # torchrun gives each rank OMP_NUM_THREADS=1 when it starts 2 or more, and leaves a single rank
    # all the cores: the runs would not compare like with like. Same threads per rank for all.
    threads_set = "OMP_NUM_THREADS" not in os.environ
    if threads_set:
        os.environ["OMP_NUM_THREADS"] = "1"
    try:
        return _compare(argv, options, runs, outcomes, threads_set)
    finally:
        if threads_set:
            os.environ.pop("OMP_NUM_THREADS", None)


def _compare(argv: list[str], options: Any, runs: list[dict[str, Any]], outcomes: dict[int, Any],
             threads_set: bool) -> int:
    from ddpcheck.run.launcher.html_report import fmt_rate
    from ddpcheck.run import registry
    from ddpcheck.run.launcher import scaling
    from ddpcheck.run.launcher import command_line, job, presentation

    for i, n in enumerate(options.scaling, 1):
        _say(options, f"--scaling: run {i} of {len(options.scaling)}, {n} rank{'s' if n > 1 else ''}")
        record_dir = tempfile.mkdtemp(prefix=f"ddpcheck-run-{n}-")
        try:
            outcome = job.run_job(command_line.parse(argv, record_dir, nproc=n), argv, record_dir)
        finally:
            if os.environ.get("DDPCHECK_KEEP_RECORDS"):
                print(f"ddpcheck: rank records kept in {record_dir}", file=sys.stderr)
            else:
                shutil.rmtree(record_dir, ignore_errors=True)
        row = scaling.run_entry(n, outcome.data, outcome.exit_code)
        runs.append(row)
        outcomes[n] = outcome
        rate = row["samples_per_s"]
        _say(options, f"--scaling: {n} rank{'s' if n > 1 else ''}: "
             + (f"{fmt_rate(rate)} samples/s" if rate else "no samples counted")
             + f", exit code {outcome.exit_code}")

    block, verdict = scaling.summarise(runs)
    if not options.selects(scaling.CODE):  # --ignore DDP143: the table, not the finding
        verdict = replace(verdict, status="not-run", message=None)
    last = outcomes[max(outcomes)]
    block["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    block["omp_num_threads_set_by_ddpcheck"] = threads_set
    run_part = last.data["run"]
    run_part["scaling"] = block
    cls = registry.checks()[scaling.CODE]
    last.rows = [replace(r, status=verdict.status, verdict=verdict) if r.code == scaling.CODE else r
                 for r in last.rows]
    if verdict.status == FAIL:
        finding = Finding(code=scaling.CODE, name=cls.name, message=verdict.message or verdict.detail,
                          severity=Severity(verdict.severity) if verdict.severity else cls.severity,
                          hint=cls.fix_hint(), details=dict(verdict.details))
        last.findings.append(finding)
        last.data.update({k: v for k, v in document(last.findings, "run").items()
                          if k in ("findings", "summary")})
    for check in run_part["checks"]:
        if check.get("code") == scaling.CODE:
            check.update(status=verdict.status, detail=verdict.detail, details=dict(verdict.details))
    # The largest run's code (findings 1, the script failed 3), else a smaller run's, else 1 when
    # the learning rate did not scale.
    exit_code = last.exit_code or next((o.exit_code for o in outcomes.values() if o.exit_code), 0) \
        or (1 if verdict.status == FAIL else 0)
    run_part["job"]["exit_code"] = exit_code
    last.exit_code = exit_code
    return presentation.present(last, options)


def _say(options: Any, message: str) -> None:
    if not options.quiet:
        print(f"ddpcheck: {message}", file=sys.stderr, flush=True)
