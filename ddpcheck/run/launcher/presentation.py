"""Show a finished job: write the report files and print the result in the chosen format."""

from __future__ import annotations

import os
import sys
from typing import Any

from ddpcheck.run.atomic_file import write_atomic
from ddpcheck.run.launcher.job import Outcome


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
            write_atomic(options.html, html_report.render(data))
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
