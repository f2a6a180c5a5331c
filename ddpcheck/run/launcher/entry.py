"""`ddpcheck run [--nproc N] [torchrun options] [ddpcheck options] SCRIPT [ARGS...]` (or `-m MODULE`).

`main(argv) -> exit code` (the rule: launcher/exit_codes.py; 2 for a usage error). The CLI calls it. The launcher's
pipeline, each step in its own module of this package:

    command_line.parse → plan.prepare → launch.run (torchrun, or the plain interpreter)
      → records.load_records → judging.judge_all → exit_codes → results (table, JSON, formats)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from ddpcheck.errors import UserError
from ddpcheck.findings import Finding
from ddpcheck.run.records import Record


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    record_dir = tempfile.mkdtemp(prefix="ddpcheck-run-")
    try:
        return _run(argv, record_dir)
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0
    finally:
        if not os.environ.get("DDPCHECK_KEEP_RECORDS"):
            shutil.rmtree(record_dir, ignore_errors=True)
        else:
            print(f"ddpcheck: rank records kept in {record_dir}", file=sys.stderr)


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


def _run(argv: list[str], record_dir: str) -> int:
    from ddpcheck.run.launcher import command_line

    job_launch = command_line.parse(argv, record_dir)
    if job_launch.options.rehearse:
        from ddpcheck.run.rehearse import rehearsal

        return rehearsal.run(job_launch, argv)
    from ddpcheck.run.launcher import memory

    # The ranks this machine runs: every node's with --nodes, the largest size of --scaling.
    local_ranks = max(job_launch.options.scaling or (job_launch.nproc,)) * job_launch.nodes
    memory.check(local_ranks, job_launch.nodes - 1)
    if job_launch.options.scaling:
        from ddpcheck.run.launcher import scaling_runs

        return scaling_runs.run(argv, job_launch.options)
    outcome = run_job(job_launch, argv, record_dir)
    return present(outcome, job_launch.options)


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
    for rank in data["run"]["ranks"]:  # the per-step rows stay in the rank records
        rank.get("probes", {}).get("timing", {}).pop("steps", None)
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


def present(outcome: Outcome, options: Any) -> int:
    """Write the report files and print the result in the chosen format; returns the exit code
    (2 when a report file could not be written: the rest is still shown)."""
    from ddpcheck.run.launcher import results

    data = outcome.data
    job = data["run"]["job"]
    failed: list[str] = []
    if options.report:
        try:
            results.write_report(options.report, data)
        except OSError as exc:
            failed.append(f"ddpcheck run: --report {_shown(options.report)}: cannot write it ({exc.strerror or exc}); "
                          "give a file path you can write to")
    html_written = False
    if options.html:
        from ddpcheck.run.launcher import html_report

        try:
            results.write_atomic(options.html, html_report.render(data))
            html_written = True
        except OSError as exc:
            failed.append(f"ddpcheck run: --html {_shown(options.html)}: cannot write it ({exc.strerror or exc}); "
                          "give a file path you can write to")
    if options.output_format == "full":
        # (with --nodes every node ran here: no "this node ran ranks ..." note)
        results.print_incidents(outcome.first, outcome.records if outcome.nodes == 1 else [])
        results.print_table(outcome.rows, job, show_skipped=options.show_skipped)
        results.print_incidents(outcome.notes, [])
        print(results.totals(outcome.rows, job), flush=True)
        if data["run"].get("performance") or data["run"].get("scaling"):
            from ddpcheck.run.launcher import performance_view

            if data["run"].get("performance"):
                performance_view.print_performance(data["run"]["performance"])
            if data["run"].get("scaling"):
                performance_view.print_scaling(data["run"]["scaling"])
        if job["torchrun_log"]:
            print(f"torchrun's own log: {job['torchrun_log']}", flush=True)
        if html_written:
            print(f"ddpcheck: HTML report written to {_shown(options.html)}")
    else:
        print(results.render_other(options.output_format, outcome.findings, data))
    if job.get("flight_recorder_dumps"):
        folder = job["flight_recorder_dumps"]
        print(f"ddpcheck: the ranks' Flight Recorder dumps are in {folder}; "
              f"replay the analysis with `ddpcheck trace {folder}`", file=sys.stderr, flush=True)
    for line in failed:
        print(line, file=sys.stderr, flush=True)
    return 2 if failed else outcome.exit_code


def _shown(path: str) -> str:
    shown = os.path.relpath(path)
    return path if shown.startswith("..") else shown
