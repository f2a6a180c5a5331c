"""What the user sees after the job: the rich summary table, the `--report` JSON, and the other
`--output-format`s. Schema of the JSON: REPORT.md next to this file."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ddpcheck.run.verdicts import Row, fix_hint

REPORT_VERSION = 1
_STATUS = {"fail": "[bold red]FAIL[/]", "pass": "[green]pass[/]", "skip": "[dim]skip[/]",
           "not-run": "[dim]not run[/]"}


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


def _ranks(row: Row) -> str:
    return ",".join(map(str, row.verdict.ranks)) if row.verdict and row.verdict.ranks else ""


def print_table(rows: list[Row], job: dict[str, Any], stream=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=False,
                      width=None if (stream or sys.stdout).isatty() or os.environ.get("COLUMNS")
                      else 160)
    table = Table(title=f"ddpcheck run: {job['target']} on {job['world_size']} ranks", title_justify="left")
    for col in ("status", "code", "check", "ranks", "where", "detail"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(_STATUS[row.status], row.code, row.name, _ranks(row), _where(row),
                      row.verdict.detail if row.verdict else "")
    console.print(table)
    for row in rows:
        if row.status != "fail":
            continue
        console.print(f"[bold red]{row.code}[/] [bold]{row.name}[/]: {row.verdict.message}")
        hint = fix_hint(row.code)
        if hint:
            console.print(f"  [cyan]fix:[/] {hint}")
    fails = sum(r.status == "fail" for r in rows)
    passed = sum(r.status == "pass" for r in rows)
    script = job["script_exit_code"]
    tail = f"; the script exited with {script}" if script else ""
    console.print(f"{fails} failed, {passed} passed, {len(rows) - fails - passed} skipped or not run"
                  f" ({job['steps']} optimizer steps, {job['checked_steps']} checked){tail}")


def _rank_summary(record: dict) -> dict[str, Any]:
    probes = {}
    for name, section in record.get("probes", {}).items():
        probes[name] = _strip_bulk(section)
    return {"rank": record.get("rank"), "local_rank": record.get("local_rank"), "pid": record.get("pid"),
            "status": record.get("status"), "exit_code": record.get("exit_code"),
            "steps": record.get("step"), "error": record.get("error"), "notes": record.get("notes", []),
            "exchange_ok": record.get("exchange_ok"), "probes": probes}


def _strip_bulk(value):
    """The report keeps figures, not every drawn index (those stay in the rank records)."""
    if isinstance(value, dict):
        return {k: _strip_bulk(v) for k, v in value.items() if k not in ("indices",)}
    if isinstance(value, list):
        return [_strip_bulk(v) for v in value]
    return value


def report_dict(rows: list[Row], findings, records: list[dict], job: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": REPORT_VERSION,
        "tool": "ddpcheck",
        "job": job,
        "checks": [{"code": r.code, "name": r.name, "status": r.status,
                    "explained_by": r.explained_by,
                    "detail": r.verdict.detail if r.verdict else None,
                    "ranks": list(r.verdict.ranks) if r.verdict else [],
                    "step": r.verdict.step if r.verdict else None,
                    "epoch": r.verdict.epoch if r.verdict else None,
                    "details": r.verdict.details if r.verdict else {}} for r in rows],
        "findings": [f.to_dict() for f in findings],
        "ranks": [_rank_summary(r) for r in records],
    }


def write_report(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def render_other(fmt: str, findings, data: dict[str, Any]) -> str:
    """`json` prints the full run report (the same document as --report); concise, github and
    sarif use the shared reporters, exactly as `ddpcheck lint` does."""
    if fmt == "json":
        return json.dumps(data, indent=2, default=str)
    from ddpcheck.report import render

    return render(fmt, findings, tool="run").rstrip("\n")
