"""One job: launch the script on torchrun, judge the ranks' records, build the report document.

`run_job` is the launcher's pipeline for a single world size; the scaling sweep calls it once per size.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

from ddpcheck.errors import UserError
from ddpcheck.findings import Finding
from ddpcheck.run.records import Record


@dataclass
class Outcome:
    """One job's result: its exit code, the report document and what the terminal shows."""

    exit_code: int
    data: dict[str, Any]
    rows: list[Any]
    first: list[Finding]  # the incidents that lead (the root cause)
    notes: list[Finding]  # the other incidents
    findings: list[Finding]
    records: list[Record]
    nodes: int = 1  # nodes emulated on this machine (`--nodes`): every rank's record is here


def run_job(job_launch: Any, argv: list[str], record_dir: str) -> Outcome:
    """Launch the job, judge its records, and build the report document."""
    from ddpcheck.run import performance, registry
    from ddpcheck.run.launcher import exit_codes, judging, launch, launcher_log, plan, results
    from ddpcheck.run.records import load_records
    from ddpcheck.run.verdict import Context

    options = job_launch.options
    job_plan = plan.prepare(job_launch)
    result = launch.run(job_launch, job_plan)
    records = load_records(record_dir)
    switch = plan.spawn_requested(job_plan, records)
    if switch is not None:  # a script that runs either way took its spawn branch under torchrun
        _empty(record_dir)
        _flight_recorder_dumps(job_plan)  # the torchrun attempt's folder: the next plan makes its own
        job_plan = plan.prepare(job_launch, switch_to=switch)
        result = launch.run(job_launch, job_plan)
        records = load_records(record_dir)
    if result.launcher_error and not records:
        raise UserError(f"ddpcheck run: the launcher failed before any rank started: "
                        f"{result.launcher_error}")

    ctx = Context(
        world_size=judging.world_size(records, job_launch.nproc * job_launch.nnodes_max),
        check_first=options.check_first, check_every=options.check_every, record_dir=record_dir,
        exit_codes=dict(result.exit_codes), interrupted=job_plan.interrupted,
        spawn_site=job_plan.spawn_site, nproc_ignored=job_plan.nproc_ignored,
    )
    judged = judging.judge_all(records, ctx, options.codes)
    rows = judging.rows(judged)
    incidents = judging.incident_findings(judged)
    first, notes = results.leading(incidents)
    findings = first + judging.check_findings(judged) + notes  # the root cause leads

    happened = judged.happened
    dumps = _flight_recorder_dumps(job_plan)
    script_code = 0 if exit_codes.stopped_by_ddpcheck(happened) else \
        exit_codes.script_exit_code(records, result.exit_codes)
    exit_code = exit_codes.exit_code(happened, script_code, exit_codes.fails_the_run(findings))
    target = job_launch.target
    job: dict[str, Any] = {
        "target": target.name if target.kind == "module" else os.path.relpath(target.name),
        "kind": target.kind,
        "args": list(target.args),
        "argv": argv,
        "world_size": ctx.world_size,
        "ranks_reported": [r.get("rank") for r in records],
        "launcher_ok": result.ok,
        "torchrun_log": launcher_log.keep(record_dir) if not result.ok else None,
        "launcher_error": result.launcher_error,
        "failed_ranks": {str(k): v for k, v in result.exit_codes.items()},
        "script_exit_code": script_code,
        "exit_code": exit_code,
        "steps": max([r.get("step", 0) for r in records] or [0]),
        "checked_steps": max([int(r.get("checked", 0)) for r in records] or [0]),
        "check_first": options.check_first,
        "check_every": options.check_every,
        "selected": list(options.codes if options.codes is not None else registry.checks()),
        "flight_recorder_dumps": dumps,
    }
    data = results.report_dict(rows, findings, records, job)
    perf = performance.summarise(records)
    if perf is not None:
        data["run"]["performance"] = perf
    return Outcome(exit_code, data, rows, first, notes, findings, records, job_launch.nodes)


def _flight_recorder_dumps(job_plan: Any) -> str | None:
    """The folder of the ranks' Flight Recorder dumps when ranks wrote any (they do when ddpcheck
    stops a hung job); a folder ddpcheck made and nobody wrote to is removed."""
    from ddpcheck.run import flight_recorder

    folder = job_plan.flight_recorder_folder or flight_recorder.dump_folder()
    if flight_recorder.written(folder):
        return folder
    if job_plan.flight_recorder_folder:
        shutil.rmtree(job_plan.flight_recorder_folder, ignore_errors=True)
    return None


def _empty(record_dir: str) -> None:
    """Forget a job's records (and live files, logs) before the script runs again."""
    for name in os.listdir(record_dir):
        path = os.path.join(record_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:
                pass
