"""`# noqa` suppression, Ruff's way: on the reported line, bare or with codes (prefixes allowed),
and a file-level `# ddpcheck: noqa[: CODES]` anywhere in the file."""

from __future__ import annotations

import re

from ddpcheck.findings import Finding

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_FILE_NOQA = re.compile(
    r"#\s*ddpcheck:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I
)


def _codes(text: str | None) -> tuple[str, ...] | None:
    """None means "every code"."""
    if not text:
        return None
    return tuple(c.upper() for c in re.split(r"[\s,]+", text.strip()) if c)


def _matches(code: str, codes: tuple[str, ...] | None) -> bool:
    return codes is None or any(code.startswith(c) for c in codes)


def file_exemption(source: str) -> tuple[str, ...] | None | bool:
    """False if the file has no `# ddpcheck: noqa`; else the codes it exempts (None = all)."""
    if "ddpcheck" not in source:
        return False
    m = _FILE_NOQA.search(source)
    if m is None:
        return False
    return _codes(m.group("codes"))


def apply(source: str, findings: list[Finding]) -> list[Finding]:
    exempt = file_exemption(source)
    if exempt is not False:
        findings = [f for f in findings if not _matches(f.code, exempt)]
    if "noqa" not in source or not findings:
        return findings
    lines = source.splitlines()
    kept = []
    for f in findings:
        suppressed = False
        for line_no in {f.line, f.end_line}:
            if line_no is None or not 0 < line_no <= len(lines):
                continue
            text = lines[line_no - 1]
            if "noqa" not in text:
                continue
            for m in _NOQA.finditer(text):
                if text[: m.start()].rstrip().endswith("ddpcheck:"):
                    continue
                if _matches(f.code, _codes(m.group("codes"))):
                    suppressed = True
        if not suppressed:
            kept.append(f)
    return kept
