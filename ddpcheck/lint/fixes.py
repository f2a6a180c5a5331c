"""Apply fixes to a file's text: non-overlapping edits, last first, like Ruff."""

from __future__ import annotations

from ddpcheck.findings import Applicability, Finding


def applicable(finding: Finding, unsafe: bool) -> bool:
    return finding.fix is not None and (unsafe or finding.fix.applicability is Applicability.SAFE)


def apply_fixes(source: str, findings: list[Finding], unsafe: bool = False) -> tuple[str, list[Finding]]:
    """The new text and the findings whose fixes were applied. An edit that overlaps one already
    taken is skipped (the next lint run reports it again)."""
    chosen: list[tuple[int, int, str, Finding]] = []
    for f in findings:
        if f.fix is None or not applicable(f, unsafe):
            continue
        for e in f.fix.edits:
            chosen.append((e.start, e.end, e.content, f))
    chosen.sort(key=lambda c: (c[0], c[1]))
    taken: list[tuple[int, int, str, Finding]] = []
    last_end = -1
    for start, end, content, f in chosen:
        if start < last_end or (start == last_end and taken and start == taken[-1][0]):
            continue
        taken.append((start, end, content, f))
        last_end = end
    out = source
    for start, end, content, _ in reversed(taken):
        out = out[:start] + content + out[end:]
    applied = []
    for *_, f in taken:
        if f not in applied:
            applied.append(f)
    return out, applied
