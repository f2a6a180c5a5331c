"""A rehearsal's report: one table of world size × finding (each problem's first world size), the
findings, and the same in JSON (`run.rehearse`, documented in ddpcheck/run/REPORT.md) and HTML.
Torch-free."""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from ddpcheck.findings import Finding, Severity
from ddpcheck.run.atomic_file import write_atomic
from ddpcheck.run.rehearse.judge import REHEARSAL_CODES, Verdict
from ddpcheck.run.rehearse.runner import RankRun


def block(verdict: Verdict, runs: dict[int, list[RankRun]], findings: list[Finding]) -> dict[str, Any]:
    """The `rehearse` part of the JSON report."""
    from ddpcheck.run import registry

    names = {code: cls.name for code, cls in registry.checks().items()}
    return {
        "world_sizes": verdict.sizes,
        "gpus_per_node": verdict.nproc,
        "baseline": [r.to_json() for r in runs.get(1, [])] if 1 not in verdict.sizes else [],
        "table": [{"code": p.code, "name": names.get(p.code, p.code), "first_world_size": p.first,
                   "cells": {str(w): p.cells.get(w, "ok") for w in verdict.sizes}}
                  for p in sorted(verdict.problems, key=lambda p: (p.first, p.code))],
        "sizes": [{"world_size": w, **verdict.facts.get(w, {}),
                   "ranks": [r.to_json() for r in runs.get(w, [])]} for w in verdict.sizes],
    }


def document(verdict: Verdict, runs: dict[int, list[RankRun]], launch: Any, argv: list[str],
             findings: list[Finding], exit_code: int) -> dict[str, Any]:
    from ddpcheck.report.json_format import document as base_document

    target = launch.target
    data = base_document(findings, "run")
    data["run"] = {
        "job": {"target": target.name if target.kind == "module" else os.path.relpath(target.name),
                "kind": target.kind, "args": list(target.args), "argv": argv,
                "world_size": max(verdict.sizes), "exit_code": exit_code, "rehearsal": True,
                "ranks_reported": [], "script_exit_code": 0, "checked_steps": 0,
                "steps": max([int(r.rehearsal.get("steps") or 0) for rs in runs.values() for r in rs] or [0]),
                "check_first": launch.options.check_first, "check_every": launch.options.check_every,
                "selected": [c for c in REHEARSAL_CODES if launch.options.selects(c)]},
        "checks": [],
        "ranks": [],
        "rehearse": block(verdict, runs, findings),
    }
    for size in data["run"]["rehearse"]["sizes"]:
        for rank in size["ranks"]:
            (rank.get("crash") or {}).pop("traceback", None)
    return data


def print_table(verdict: Verdict, stream: IO[str] | None = None) -> None:
    out = stream or sys.stdout
    sizes = verdict.sizes
    nodes = ", ".join(f"{w} ({-(-w // verdict.nproc)} node{'s' if w > verdict.nproc else ''})" for w in sizes)
    print(f"Rehearsal at {nodes}; {verdict.nproc} GPUs per node, representative ranks each run alone",
          file=out)
    rows = sorted(verdict.problems, key=lambda p: (p.first, p.code))
    width = max([len(f"{p.code} ") for p in rows] + [6])
    cols = [max(len(str(w)) + 6, *(len(p.cells.get(w, "ok")) for p in rows)) if rows else len(str(w)) + 6
            for w in sizes]
    header = "".ljust(width) + "  ".join(f"{w} ranks".ljust(c) for w, c in zip(sizes, cols))
    print(header.rstrip(), file=out)
    for p in rows:
        cells = "  ".join(p.cells.get(w, "ok").ljust(c) for w, c in zip(sizes, cols))
        print((p.code.ljust(width) + cells).rstrip(), file=out)
    if not rows:
        print("no problem found at any rehearsed world size".rjust(0), file=out)
    facts = []
    for w in sizes:
        f = verdict.facts.get(w, {})
        gb = f.get("global_batch")
        lr = f.get("lr")
        facts.append(f"{w}: ranks {', '.join(map(str, f.get('ranks_run', [])))}"
                     + (f", global batch {gb}" if gb else "") + (f", lr {lr:.4g}" if lr is not None else "")
                     + (f", {f['seconds_per_rank']:.1f} s and {f['peak_mb']:.0f} MB per rank at most"
                        if f.get("seconds_per_rank") else ""))
    for line in facts:
        print("  " + line, file=out)


def print_findings(findings: list[Finding], stream: IO[str] | None = None) -> None:
    out = stream or sys.stdout
    for f in findings:
        where = f"{f.path}:{f.line}: " if f.path and f.line else ""
        print(f"{where}{f.code} {f.name}: {f.message}", file=out)
        if f.hint:
            print(f"  fix: {f.hint}", file=out)


def present(verdict: Verdict, runs: dict[int, list[RankRun]], launch: Any, argv: list[str]) -> int:
    from ddpcheck.run.launcher import results

    options = launch.options
    findings = verdict.findings()
    findings = [f for f in findings if options.selects(f.code)]
    exit_code = 1 if any(f.severity in (Severity.ERROR, Severity.WARNING) for f in findings) else 0
    data = document(verdict, runs, launch, argv, findings, exit_code)
    failed = []
    if options.report:
        try:
            results.write_report(options.report, data)
        except OSError as exc:
            failed.append(f"ddpcheck run: --report {options.report}: cannot write it ({exc.strerror or exc})")
    if options.html:
        from ddpcheck.run.launcher import html_report

        try:
            write_atomic(options.html, html_report.render(data))
        except OSError as exc:
            failed.append(f"ddpcheck run: --html {options.html}: cannot write it ({exc.strerror or exc})")
    if options.output_format == "full":
        print_table(verdict)
        print_findings(findings)
        n = len(findings)
        print(f"{n} finding{'s' if n != 1 else ''} from the rehearsal" if n else
              "the rehearsal found nothing at these world sizes", flush=True)
    else:
        print(results.render_other(options.output_format, findings, data))
    for line in failed:
        print(line, file=sys.stderr, flush=True)
    return 2 if failed else exit_code
