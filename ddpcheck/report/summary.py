"""The closing summary: how many findings of each code, and how many are fixable."""

from __future__ import annotations

from collections import Counter

from ddpcheck.findings import Applicability, Finding


def summary_lines(findings: list[Finding]) -> list[str]:
    if not findings:
        return ["All checks passed!"]
    counts = Counter((f.code, f.name) for f in findings)
    n = len(findings)
    lines = [f"Found {n} finding{'s' if n != 1 else ''}:"]
    width = len(str(max(counts.values())))
    for (code, name), count in sorted(counts.items()):
        lines.append(f"  {count:>{width}}  {code}  {name}")
    safe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.UNSAFE)
    if safe:
        lines.append(f"[*] {safe} fixable with `--fix`.")
    if unsafe:
        lines.append(f"{unsafe} more fixable with `--fix --unsafe-fixes`.")
    return lines
