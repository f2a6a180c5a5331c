"""The default, human format: location, code, message, the source line with a marker, the hint."""

from __future__ import annotations

import io

from ddpcheck.findings import Applicability, Finding, Severity
from ddpcheck.report.summary import summary_lines

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def render(findings: list[Finding], *, sources, color, tool) -> str:
    from rich.console import Console
    from rich.markup import escape

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, highlight=False,
                      soft_wrap=True, width=120, emoji=False)
    for f in findings:
        # Ruff's marker: fixable by a plain `--fix` (unsafe fixes need --unsafe-fixes too).
        marker = " [*]" if f.fix and f.fix.applicability is Applicability.SAFE else ""
        console.print(
            f"[bold]{escape(f.location)}[/]: [{_STYLE[f.severity]}]{f.code}[/]{marker} {escape(f.message)}"
        )
        snippet = _snippet(f, sources)
        if snippet:
            console.print(snippet, markup=False, style="dim" if color else None)
        if f.ranks:
            console.print(f"  = ranks: {', '.join(map(str, f.ranks))}", markup=False)
        if f.hint:
            console.print(f"  = help: {f.hint}", markup=False)
        if f.fix:
            console.print(f"  = fix ({f.fix.applicability.value}): {f.fix.description}", markup=False)
        console.print()
    for line in summary_lines(findings):
        console.print(escape(line), style="bold" if line.startswith("Found") else None)
    return buf.getvalue()


def _snippet(f: Finding, sources: dict[str, str]) -> str:
    if not f.path or f.line is None or f.path not in sources:
        return ""
    lines = sources[f.path].splitlines()
    if not 0 < f.line <= len(lines):
        return ""
    text = lines[f.line - 1].expandtabs(4)
    gutter = len(str(f.line))
    col = max((f.column or 1) - 1, 0)
    if f.end_line == f.line and f.end_column:
        width = max(f.end_column - (f.column or 1), 1)
    else:
        width = max(len(text.rstrip()) - col, 1)
    return (
        f"{' ' * gutter} |\n"
        f"{f.line} | {text}\n"
        f"{' ' * gutter} | {' ' * col}{'^' * width} {f.code}"
    )
