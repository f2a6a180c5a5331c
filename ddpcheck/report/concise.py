"""`path:line:col: CODE message` — one line per finding, the form editors and `grep -n` parse."""

from __future__ import annotations

from ddpcheck.findings import Finding
from ddpcheck.report.summary import summary_lines


def line_for(f: Finding) -> str:
    ranks = f" [ranks {','.join(map(str, f.ranks))}]" if f.ranks else ""
    marker = " [*]" if f.fix else ""
    return f"{f.location}: {f.code}{marker} {f.message}{ranks}"


def render(findings: list[Finding], *, sources, color, tool) -> str:
    lines = [line_for(f) for f in findings]
    lines += summary_lines(findings)
    return "\n".join(lines) + "\n"
