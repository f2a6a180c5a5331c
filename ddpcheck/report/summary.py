"""The closing summary: how many findings of each code, how many are fixable, and whether every
file was checked (a file that was not must never read as "All checks passed!")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ddpcheck.findings import Applicability, Finding, ToolError


def summary_lines(findings: list[Finding], errors: Sequence[ToolError] = ()) -> list[str]:
    trouble = _errors(errors)
    if not findings and not trouble:
        return ["All checks passed!"]
    counts = Counter((f.code, f.name) for f in findings)
    n = len(findings)
    head = f"Found {n} finding{'s' if n != 1 else ''}"
    if trouble:
        head += f"; {trouble} (see errors above)"
    lines = [head + (":" if findings else "")]
    width = len(str(max(counts.values()))) if counts else 1
    for (code, name), count in sorted(counts.items()):
        lines.append(f"  {count:>{width}}  {code}  {name}")
    safe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.UNSAFE)
    if safe:
        lines.append(f"[*] {safe} fixable with `--fix`.")
    if unsafe:
        lines.append(f"{unsafe} more fixable with `--fix --unsafe-fixes`.")
    return lines


def _errors(errors: Sequence[ToolError]) -> str:
    """`1 file could not be checked`, `2 errors`, or both; "" without errors."""
    unchecked = len({e.path or "" for e in errors if e.unchecked})
    other = sum(1 for e in errors if not e.unchecked)
    parts = []
    if unchecked:
        parts.append(f"{unchecked} file{'s' if unchecked != 1 else ''} could not be checked")
    if other:
        parts.append(f"{other} {'more ' if unchecked else ''}error{'s' if other != 1 else ''}")
    return " and ".join(parts)
