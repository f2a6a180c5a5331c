"""What the user sees after the job: the rich summary table and the incidents below it, the
`--report` JSON, and the other `--output-format`s. Schema of the JSON: ddpcheck/run/REPORT.md."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import IO, Any

from ddpcheck.findings import Finding
from ddpcheck.run import registry
from ddpcheck.run.launcher.judging import Row
from ddpcheck.run.atomic_file import write_atomic
from ddpcheck.run.records import Record

_STATUS = {"fail": "[bold red]FAIL[/]", "pass": "[green]pass[/]", "not-reached": "[yellow]not reached[/]",
           "skip": "[dim]skip[/]", "not-run": "[dim]not run[/]"}
_ADVICE = "[cyan]advice[/]"  # a failed check of severity info
_WARNING = "[yellow]warning[/]"  # a failed check of severity warning


def _where(row: Row) -> str:
    v = row.verdict
    if v is None:
        return ""
    parts = []
    if v.step is not None:
        parts.append(f"step {v.step}")
    if v.epoch is not None:
        parts.append(f"epoch {v.epoch}")
    return ", ".join(parts)


def severity(row: Row) -> str | None:
    """The severity of a failed check's finding (None for a row that is not a finding)."""
    if row.status != "fail" or row.verdict is None:
        return None
    return row.verdict.severity or registry.checks()[row.code].severity.value


def _advice(row: Row) -> bool:
    """A failed check of severity info: reported, but it does not fail the run (exit_codes.py)."""
    return severity(row) == "info"


def _label(row: Row) -> str:
    return {"info": _ADVICE, "warning": _WARNING}.get(severity(row) or "", _STATUS[row.status])


def _hidden(row: Row, show_skipped: bool) -> bool:
    """Skipped and unselected checks share one line below the table unless asked for."""
    return not show_skipped and row.status in ("skip", "not-run")


def skipped_line(rows: list[Row]) -> str | None:
    """'14 checks skipped (nothing to check: DDP107, DDP110, DDP140–DDP148; explained by DDP109:
    DDP105, DDP106); --show-skipped lists them'."""
    hidden = [r for r in rows if r.status in ("skip", "not-run")]
    if not hidden:
        return None
    groups: dict[str, list[str]] = {}
    for r in hidden:
        if r.status == "not-run":
            why = "not selected"
        elif r.explained_by:
            why = f"explained by {r.explained_by}"
        else:
            why = "nothing to check"
        groups.setdefault(why, []).append(r.code)
    parts = "; ".join(f"{why}: {code_ranges(codes)}" for why, codes in groups.items())
    noun = "check" if len(hidden) == 1 else "checks"
    return f"{len(hidden)} {noun} skipped or not run ({parts}); --show-skipped lists them"


def _ranks(row: Row) -> str:
    return ",".join(map(str, row.verdict.ranks)) if row.verdict and row.verdict.ranks else ""


def print_table(rows: list[Row], job: dict[str, Any], stream: IO[str] | None = None,
                show_skipped: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=False,
                      width=None if (stream or sys.stdout).isatty() or os.environ.get("COLUMNS")
                      else 160)
    table = Table(title=f"ddpcheck run: {job['target']} on {job['world_size']} ranks", title_justify="left")
    for col in ("status", "code", "check", "ranks", "where", "detail"):
        # a grouped row's list of codes wraps rather than squeeze the detail
        table.add_column(col, overflow="fold", max_width=22 if col == "code" else None)
    shown = [r for r in rows if not _hidden(r, show_skipped)]
    groups = _not_reached_groups(shown)
    for row in shown:
        group = groups.get(row.code)
        if group is not None:  # checks stopped by the same cause: one row that lists them
            if group[0] is row:
                table.add_row(_STATUS[row.status], code_ranges([r.code for r in group]), f"{len(group)} checks",
                              "", "", escape(_NOT_REACHED_PREFIX.sub("", row.verdict.detail if row.verdict else "")))
            continue
        table.add_row(_label(row), row.code, row.name, _ranks(row),
                      _where(row), escape(row.verdict.detail) if row.verdict else "")
    console.print(table)
    if not show_skipped:
        line = skipped_line(rows)
        if line:
            console.print(f"[dim]{escape(line)}[/]")
    for row in rows:
        if row.status != "fail" or row.verdict is None:
            continue
        v = row.verdict
        where = f" {_relative(v.path)}:{v.line}" if v.path and v.line else (f" {_relative(v.path)}" if v.path else "")
        colour = {"info": "cyan", "warning": "yellow"}.get(severity(row) or "", "bold red")
        console.print(f"[{colour}]{row.code}[/] [bold]{row.name}[/]{escape(where)}: {escape(v.message or v.detail)}")
        hint = registry.checks()[row.code].fix_hint()
        if hint:
            console.print(f"  [cyan]fix:[/] {escape(hint)}")


_NOT_REACHED_PREFIX = re.compile(r"^not reached: ")


def _not_reached_groups(rows: list[Row]) -> dict[str, list[Row]]:
    """Not-reached (or not-run) rows that share their reason, by code: a run that stopped early
    leaves most checks unreached for one cause, and a narrow --select leaves most unselected,
    which reads better once. Lone rows stay as they are."""
    by_reason: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.status in ("not-reached", "not-run"):
            by_reason.setdefault((row.status, row.verdict.detail if row.verdict else ""), []).append(row)
    return {r.code: group for group in by_reason.values() if len(group) > 1 for r in group}


def code_ranges(codes: list[str]) -> str:
    """'DDP100–DDP107, DDP109, DDP110, DDP140–DDP148': three or more consecutive codes as a range."""
    def number(code: str) -> tuple[str, int] | None:
        head = code.rstrip("0123456789")
        tail = code[len(head):]
        return (head, int(tail)) if tail else None

    runs: list[list[str]] = []
    for code in sorted(codes, key=lambda c: (number(c) or (c, -1))):
        n = number(code)
        last = number(runs[-1][-1]) if runs else None
        if n is not None and last is not None and n[0] == last[0] and n[1] == last[1] + 1:
            runs[-1].append(code)
        else:
            runs.append([code])
    parts: list[str] = []
    for run in runs:
        parts += [f"{run[0]}–{run[-1]}"] if len(run) >= 3 else run
    return ", ".join(parts)


def totals(rows: list[Row], job: dict[str, Any]) -> str:
    """The closing line: '1 failed, 1 warning, 12 passed, 2 skipped or not run (40 optimizer
    steps, ...)'. A failed check counts by its finding's severity: an error fails, a warning
    warns, an info finding is advice."""
    from ddpcheck.run.verdict import plural

    count = {s: sum(r.status == s for r in rows) for s in ("fail", "pass", "not-reached")}
    advice = sum(severity(r) == "info" for r in rows)
    warnings = sum(severity(r) == "warning" for r in rows)
    rest = len(rows) - sum(count.values())
    reached = f", {count['not-reached']} not reached" if count["not-reached"] else ""
    script = job["script_exit_code"]
    tail = f"; the script exited with {script}" if script else ""
    said = (f", {plural(warnings, 'warning')}" if warnings else "") + (f", {advice} advice" if advice else "")
    return (f"{count['fail'] - advice - warnings} failed{said}, {count['pass']} passed{reached}, "
            f"{rest} skipped or not run ({plural(job['steps'], 'optimizer step')}, {job['checked_steps']} checked){tail}")


def leading(found: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """The incidents that say why the run stopped (a crash, a hang, a kill, an early end), first in
    time first: the report leads with them. The others (notes such as the emulation) follow the table."""
    checks = registry.checks()
    first = [f for f in found if getattr(checks[f.code], "leads", checks[f.code].severity.value == "error")]
    first.sort(key=_when)
    return first, [f for f in found if f not in first]


def _when(finding: Finding) -> float:
    at = finding.details.get("at")
    return float(at) if isinstance(at, (int, float)) else float("inf")


def _rank_summary(record: Record) -> dict[str, Any]:
    """What the report says of one rank: who it was and how it ended. Its probes' data stay in its
    record (kept with DDPCHECK_KEEP_RECORDS=1): the report does not grow with the run."""
    return {"rank": record.get("rank"), "local_rank": record.get("local_rank"), "pid": record.get("pid"),
            "status": record.get("status"), "exit_code": record.get("exit_code"),
            "steps": record.get("step"), "checked_steps": record.get("checked"), "error": record.get("error"),
            "notes": record.get("notes", []), "exchange_ok": record.get("exchange_ok"),
            "stopped": record.get("stopped")}


def report_dict(rows: list[Row], findings: list[Finding], records: list[Record], job: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: `ddpcheck lint`'s document (schema_version, tool, version, command,
    findings, summary) with what only a run has under "run"."""
    from ddpcheck.report.json_format import document

    data = document(findings, "run")
    data["run"] = {
        "job": job,
        "checks": [{"code": r.code, "name": r.name, "status": r.status,
                    "severity": severity(r),
                    "explained_by": r.explained_by,
                    "detail": r.verdict.detail if r.verdict else None,
                    "ranks": list(r.verdict.ranks) if r.verdict else [],
                    "step": r.verdict.step if r.verdict else None,
                    "epoch": r.verdict.epoch if r.verdict else None,
                    "details": r.verdict.details if r.verdict else {}} for r in rows],
        "ranks": [_rank_summary(r) for r in records],
    }
    return data


def write_report(path: str, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def render_other(fmt: str, findings: list[Finding], data: dict[str, Any]) -> str:
    """`json` prints the full run report (the same document as --report); concise, github and
    sarif use the shared reporters, exactly as `ddpcheck lint` does."""
    if fmt == "json":
        return json.dumps(data, indent=2, default=str)
    from ddpcheck.report import render

    return render(fmt, findings, tool="run").rstrip("\n")


def node_note(records: list[Record]) -> str | None:
    """On a node without global rank 0: which ranks ran here, and who has the verdicts."""
    ranks = sorted(r.get("rank", 0) for r in records)
    world = max([r.get("world_size", 1) for r in records] or [1])
    several_nodes = any(r.get("rank") != r.get("local_rank") for r in records)
    if not several_nodes or not ranks or 0 in ranks:
        return None
    if len(ranks) == 1:
        span = f"rank {ranks[0]}"
    elif ranks == list(range(ranks[0], ranks[-1] + 1)):
        span = f"ranks {ranks[0]}–{ranks[-1]}"
    else:
        span = "ranks " + ", ".join(map(str, ranks))
    return (f"ddpcheck: this node ran {span} of {world}; the verdicts across all ranks are "
            "printed by the node that holds rank 0")


def print_incidents(found: list[Finding], records: list[Record], stream: IO[str] | None = None) -> None:
    """After the table: what happened to the run (crash, hang, emulation, ...), one line each."""
    out = stream or sys.stdout
    note = node_note(records)
    if note:
        print(note, file=out)
    if not found:
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(file=out, highlight=False, soft_wrap=True)
    colour = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for f in found:
        where = f" {_relative(f.path)}:{f.line}" if f.path and f.line else (f" {_relative(f.path)}" if f.path else "")
        console.print(f"[{colour[f.severity.value]}]{f.code}[/] [bold]{f.name}[/]{escape(where)}: "
                      f"{escape(f.message)}")
        if f.hint:
            console.print(f"  [cyan]fix:[/] {escape(f.hint)}")


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel
