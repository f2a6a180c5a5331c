"""`path:line:col: CODE message` — one line per finding, the form editors and `grep -n` parse."""

from __future__ import annotations

from collections.abc import Sequence

from ddpcheck.findings import Applicability, Finding, ToolError
from ddpcheck.report.summary import summary_lines


def line_for(f: Finding) -> str:
    ranks = f" [ranks {','.join(map(str, f.ranks))}]" if f.ranks else ""
    # Ruff's marker: fixable by a plain `--fix` (unsafe fixes need --unsafe-fixes too).
    marker = " [*]" if f.fix and f.fix.applicability is Applicability.SAFE else ""
    return f"{f.location}: {f.code}{marker} {f.message}{ranks}"


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str,
           errors: Sequence[ToolError] = ()) -> str:
    lines = [line_for(f) for f in findings]
    lines += summary_lines(findings, errors)
    return "\n".join(lines) + "\n"
