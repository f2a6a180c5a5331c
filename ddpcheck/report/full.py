"""The default, human format: location, code, message, the source line with a marker, the hint."""

from __future__ import annotations

import io
from collections.abc import Sequence

from ddpcheck.findings import Applicability, Finding, Severity, ToolError
from ddpcheck.report.summary import summary_lines

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str,
           errors: Sequence[ToolError] = ()) -> str:
    # Plain text needs no library; rich is imported only to colour a terminal.
    lines: list[tuple[str, str | None, bool]] = []  # (text, style, text holds markup)
    for f in findings:
        # Ruff's marker: fixable by a plain `--fix` (unsafe fixes need --unsafe-fixes too).
        marker = " [*]" if f.fix and f.fix.applicability is Applicability.SAFE else ""
        lines.append((f"{f.location}\0: \1{f.code}\2{marker} {f.message}", _STYLE[f.severity], True))
        snippet = _snippet(f, sources)
        if snippet:
            lines.append((snippet, "dim", False))
        if f.ranks:
            lines.append((f"  = ranks: {', '.join(map(str, f.ranks))}", None, False))
        if f.hint:
            lines.append((f"  = help: {f.hint}", None, False))
        if f.fix:
            lines.append((f"  = fix ({f.fix.applicability.value}): {f.fix.description}", None, False))
        lines.append(("", None, False))
    for line in summary_lines(findings, errors):
        lines.append((line, "bold" if line.startswith("Found") else None, False))
    if not color:
        return "".join(text.replace("\0", "").replace("\1", "").replace("\2", "") + "\n"
                       for text, _, _ in lines)
    return _colored(lines)


def _colored(lines: list[tuple[str, str | None, bool]]) -> str:
    from rich.console import Console
    from rich.markup import escape

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, highlight=False, soft_wrap=True, width=120, emoji=False)
    for text, style, header in lines:
        if header:
            location, rest = text.split("\0", 1)
            code, tail = rest.split("\1", 1)[1].split("\2", 1)
            console.print(f"[bold]{escape(location)}[/]: [{style}]{code}[/]{escape(tail)}")
        else:
            console.print(text, style=style, markup=False)
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
