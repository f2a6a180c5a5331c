"""`# noqa` comments, Ruff's way: on the reported line, bare or with codes (prefixes allowed), and a
file-level `# ddpcheck: noqa[: CODES]` anywhere in the file. Also what `--add-noqa` writes and
which directives suppress nothing (DDP901).

Only real comments count: a `# noqa` inside a string is text (found with the tokenizer, which
runs only for files that contain "noqa" at all)."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ddpcheck.findings import Edit, Finding, Fix

if TYPE_CHECKING:
    from ddpcheck.describe import RuleInfo

_CODES = r"[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*"
_NOQA = re.compile(rf"#\s*noqa(?::\s*(?P<codes>{_CODES}))?", re.I)
_FILE_NOQA = re.compile(rf"#\s*ddpcheck:\s*noqa(?::\s*(?P<codes>{_CODES}))?", re.I)


@dataclass(frozen=True)
class Directive:
    """One `# noqa[: CODES]` on a line. Offsets index the file's text."""

    line: int  # 1-based
    start: int  # the directive's "#"
    end: int  # just past its last code (or past "noqa")
    codes: tuple[str, ...] | None  # None: a bare `# noqa` (every code)
    comment_start: int  # the comment that holds it
    comment_end: int


def _codes(text: str | None) -> tuple[str, ...] | None:
    """None means "every code"."""
    if not text:
        return None
    return tuple(c.upper() for c in re.split(r"[\s,]+", text.strip()) if c)


def _matches(code: str, codes: tuple[str, ...] | None) -> bool:
    return codes is None or any(code.startswith(c) for c in codes)


def file_exemption(source: str) -> tuple[str, ...] | None | Literal[False]:
    """False if the file has no `# ddpcheck: noqa`; else the codes it exempts (None = all)."""
    if "ddpcheck" not in source:
        return False
    m = _FILE_NOQA.search(source)
    if m is None:
        return False
    return _codes(m.group("codes"))


def _line_starts(source: str) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _comments(source: str) -> list[tuple[int, int, str]] | None:
    """(line, column, text) of every comment; None if the file does not tokenize."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.start[1], tok.string))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return out


def directives(source: str) -> list[Directive]:
    """Every line-level noqa directive in real comments (file-level ones are not included)."""
    if "noqa" not in source.lower():
        return []
    comments = _comments(source)
    starts = _line_starts(source)
    if comments is None:  # does not tokenize: fall back to the text of each line
        comments = []
        for number, text in enumerate(source.splitlines(), 1):
            at = text.find("#")
            if at >= 0:
                comments.append((number, at, text[at:]))
    found = []
    for line, column, text in comments:
        if "noqa" not in text.lower():
            continue
        base = starts[line - 1] + column
        for m in _NOQA.finditer(text):
            if text[: m.start()].rstrip().lower().endswith("ddpcheck:"):
                continue  # the file-level form
            found.append(Directive(line, base + m.start(), base + m.end(), _codes(m.group("codes")),
                                   base, base + len(text)))
    return found


def partition(source: str, findings: list[Finding]) -> tuple[list[Finding], dict[Directive, set[str]]]:
    """The findings no noqa suppresses, and for each directive the codes it suppressed."""
    exempt = file_exemption(source)
    if exempt is not False:
        findings = [f for f in findings if not _matches(f.code, exempt)]
    used: dict[Directive, set[str]] = {}
    if not findings:
        return findings, used
    by_line: dict[int, list[Directive]] = {}
    for d in directives(source):
        by_line.setdefault(d.line, []).append(d)
    if not by_line:
        return findings, used
    kept = []
    for f in findings:
        suppressed = False
        for line in {f.line, f.end_line}:
            for d in by_line.get(line or 0, ()):
                if _matches(f.code, d.codes):
                    suppressed = True
                    used.setdefault(d, set()).add(f.code)
        if not suppressed:
            kept.append(f)
    return kept, used


def apply(source: str, findings: list[Finding]) -> list[Finding]:
    """The findings that no `# noqa` suppresses."""
    return partition(source, findings)[0]


def unused_directives(path: str, source: str, used: dict[Directive, set[str]],
                      enabled: frozenset[str], known: Mapping[str, RuleInfo]) -> list[Finding]:
    """DDP901 findings: noqa codes that suppressed nothing in this run, or name no ddpcheck code.

    Judged conservatively: only ddpcheck codes (`# noqa: E501` belongs to another tool), only
    when every code an entry covers is a static code enabled for this file (a rule that is off
    here may be on in another job), and never a bare `# noqa` (other linters read it too)."""
    from ddpcheck.catalog import complete
    from ddpcheck.tool_codes import UnusedNoqa

    findings = []
    starts = _line_starts(source)
    for d in directives(source):
        if d.codes is None:
            continue
        if any(c.startswith("DDP") and c not in known for c in d.codes):
            known = complete(known)  # a runtime code, or a prefix that may cover some
        unused, unknown, keep = [], [], []
        for code in d.codes:
            covered = [k for k in known if k.startswith(code)]
            if not code.startswith("DDP"):
                keep.append(code)
            elif not covered:
                unknown.append(code)
            elif any(known[k].kind == "run" for k in covered) or not all(k in enabled for k in covered):
                keep.append(code)  # may suppress something in `ddpcheck run` or another job
            elif not any(u.startswith(code) for u in used.get(d, set())):
                unused.append(code)
            else:
                keep.append(code)
        if not unused and not unknown:
            continue
        parts = []
        if unused:
            parts.append(f"unused: {', '.join(unused)}")
        if unknown:
            parts.append(f"unknown: {', '.join(unknown)}")
        column = d.start - starts[d.line - 1]
        findings.append(Finding(
            code=UnusedNoqa.code, name=UnusedNoqa.name,
            message=f"`noqa` directive suppresses nothing ({'; '.join(parts)}): remove it",
            severity=UnusedNoqa.severity, path=path, line=d.line, column=column + 1,
            end_line=d.line, end_column=column + 1 + (d.end - d.start),
            fix=_removal(source, d, keep),
        ))
    return findings


def _removal(source: str, d: Directive, keep: list[str]) -> Fix:
    if keep:
        return Fix("Remove the unused codes", (Edit(d.start, d.end, f"# noqa: {', '.join(keep)}"),))
    comment = source[d.comment_start:d.comment_end]
    before = comment[: d.start - d.comment_start].rstrip()
    after = comment[d.end - d.comment_start:].strip()
    if before and before != "#":
        # `# why  # noqa: X` keeps `# why`.
        start = d.comment_start + len(before)
        return Fix("Remove the unused `noqa` directive", (Edit(start, d.end, ""),))
    if after:
        # `# noqa: X why` keeps `# why`.
        return Fix("Remove the unused `noqa` directive", (Edit(d.comment_start, d.comment_end, f"# {after.lstrip('#').strip()}"),))
    # The whole comment goes, with the blanks before it.
    start = d.comment_start
    while start > 0 and source[start - 1] in " \t":
        start -= 1
    line_start = source.rfind("\n", 0, d.comment_start) + 1
    if not source[line_start:start].strip():
        start = d.comment_start  # a comment on a line of its own: leave the indentation alone
    return Fix("Remove the unused `noqa` directive", (Edit(start, d.comment_end, ""),))


def _commentable_lines(source: str) -> set[int] | None:
    """Lines whose end may take a comment: not inside a string, not continued by a backslash."""
    lines = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT):
                lines.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return lines


def add_noqa(source: str, findings: list[Finding]) -> tuple[str, int]:
    """The text with `# noqa: CODES` on every line that has a finding, merged into an existing
    directive; and how many lines changed. Applying it twice changes nothing the second time."""
    from ddpcheck.tool_codes import SyntaxErrorInFile, UnusedNoqa

    commentable = _commentable_lines(source)
    if commentable is None:
        return source, 0
    wanted: dict[int, list[str]] = {}
    for f in findings:
        if f.code in (SyntaxErrorInFile.code, UnusedNoqa.code) or f.line is None:
            continue
        line = next((n for n in (f.line, f.end_line) if n in commentable), None)
        if line is not None and f.code not in wanted.setdefault(line, []):
            wanted[line].append(f.code)
    existing = {d.line: d for d in directives(source)}
    lines = source.splitlines(keepends=True)
    starts = _line_starts(source)
    edits: list[tuple[int, int, str]] = []
    for line, codes in sorted(wanted.items()):
        d = existing.get(line)
        if d is not None:
            if d.codes is None:
                continue  # a bare noqa already covers every code
            merged = list(d.codes) + sorted(c for c in codes if not _matches(c, d.codes))
            if len(merged) > len(d.codes):
                edits.append((d.start, d.end, f"# noqa: {', '.join(merged)}"))
            continue
        text = lines[line - 1]
        body = text.rstrip("\r\n")
        end = starts[line - 1] + len(body.rstrip())
        edits.append((end, starts[line - 1] + len(body), f"  # noqa: {', '.join(sorted(codes))}"))
    out = source
    for start, end, content in sorted(edits, reverse=True):
        out = out[:start] + content + out[end:]
    return out, len(edits)


def settle(path: str, source: str, raw: list[Finding], codes: frozenset[str],
           known: Mapping[str, RuleInfo]) -> list[Finding]:
    """A file's findings as reported: `raw` less what noqa suppresses, plus DDP901 when enabled."""
    from ddpcheck.tool_codes import SyntaxErrorInFile, UnusedNoqa

    # Findings on lines of other project modules were settled against their own text already.
    others = [f for f in raw if f.path != path]
    kept, used = partition(source, [f for f in raw if f.path == path])
    kept += others
    if UnusedNoqa.code in codes and "noqa" in source.lower() \
            and not any(f.code == SyntaxErrorInFile.code for f in raw):
        kept = sorted(kept + unused_directives(path, source, used, codes, known), key=Finding.sort_key)
    return kept
