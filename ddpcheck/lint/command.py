"""`ddpcheck lint` from options to exit code: discover, lint, fix or add noqa, report."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ddpcheck.config import Selection, SettingsResolver, describe, validate_codes
from ddpcheck.errors import UserError
from ddpcheck.findings import Finding, ToolError
from ddpcheck.lint.files import discover
from ddpcheck.lint.fixes import apply_fixes
from ddpcheck.lint.source_text import strictly_decodable
from ddpcheck.lint.runner import (
    LintResult,
    ReadError,
    decode_source,
    internal_error,
    lint_files,
    lint_text,
    read_source,
)
from ddpcheck.report import FORMATS, render

if TYPE_CHECKING:
    from ddpcheck.describe import RuleInfo
    from ddpcheck.lint.model import Project

MAX_FIX_PASSES = 10
TEXT_FORMATS = ("full", "concise")  # formats a person reads: they get the fix listings


@dataclass(frozen=True)
class LintOptions:
    paths: list[str]
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    config: Path | None = None
    output_format: str = "full"
    output_file: Path | None = None
    statistics: bool = False
    exit_zero: bool = False
    exit_non_zero_on_fix: bool = False
    fix: bool = False
    fix_only: bool = False
    unsafe_fixes: bool = False
    show_fixes: bool = False
    diff: bool = False
    add_noqa: bool = False
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    force_exclude: bool = False
    stdin_filename: str | None = None
    show_settings: bool = False
    color: bool = False
    jobs: int | None = None  # worker processes; None: automatic
    no_cache: bool = False


@dataclass
class FixReport:
    """What the fixes did: the findings whose fixes were applied (or, with --diff, would be)."""

    applied: list[Finding] = field(default_factory=list)
    files: int = 0  # files changed


def run_lint(o: LintOptions) -> int:
    _check_combinations(o)
    known: Mapping[str, RuleInfo]
    if o.no_cache:
        from ddpcheck.catalog import lint_codes

        known = lint_codes()
    else:
        from ddpcheck.lint.cache import cache_root, catalog

        known = catalog(cache_root())  # a fully cached run never imports the rules (nor libcst)
    overrides = Selection(
        select=None if o.select is None else validate_codes(o.select, "--select", known),
        extend_select=validate_codes(o.extend_select, "--extend-select", known),
        ignore=validate_codes(o.ignore, "--ignore", known),
    )
    resolver = SettingsResolver(known, config=o.config, overrides=overrides,
                                exclude=o.exclude, extend_exclude=o.extend_exclude)
    if o.show_settings:
        from ddpcheck.catalog import complete

        target = Path(o.stdin_filename if o.paths == ["-"] and o.stdin_filename else o.paths[0])
        print(describe(resolver.for_path(target), complete(known), target))
        return 0

    fixes = FixReport()
    report_to = sys.stdout
    if o.paths == ["-"]:
        result, report_to = _lint_stdin(o, resolver, known, fixes)
    else:
        if "-" in o.paths:
            raise UserError("`-` (stdin) cannot be combined with other paths")
        if o.jobs is not None and o.jobs < 1:
            raise UserError(f"--jobs {o.jobs}: must be at least 1 (leave it out to choose automatically)")
        found = discover(o.paths, resolver, force_exclude=o.force_exclude)
        cache = None
        if not o.no_cache:
            from ddpcheck.lint.cache import LintCache, cache_root

            cache = LintCache(cache_root())
        result = lint_files(list(found.files), resolver, jobs=o.jobs, cache=cache, known=known)
        result.errors[:0] = found.errors
        if o.add_noqa:
            return _add_noqa(result)
        if o.fix or o.diff:
            _fix_files(result, resolver, o, fixes, known)

    for error in result.errors:
        print(f"ddpcheck: error: {error.line}", file=sys.stderr)
    fix_only = o.fix_only or o.diff
    if not fix_only:
        text = _statistics(o, result.findings) if o.statistics else render(
            o.output_format, result.findings, sources=result.sources, color=o.color and o.output_file is None,
            errors=result.errors)
        if o.show_fixes and o.output_format in TEXT_FORMATS and not o.statistics:
            text += _fix_listing(fixes)
        _emit(text, o.output_file, report_to)
    elif o.show_fixes and o.fix and not o.diff:
        _emit(_fix_listing(fixes), o.output_file, report_to)
    _fix_summary(o, fixes)

    if result.errors:
        return 2
    if o.exit_zero:
        return 0
    if o.diff:
        return 1 if fixes.applied else 0  # Ruff's contract: a diff to apply is a failure
    if not fix_only and result.findings:
        return 1
    if o.exit_non_zero_on_fix and fixes.files:
        return 1
    return 0


def _check_combinations(o: LintOptions) -> None:
    if o.output_format not in FORMATS:
        raise UserError(f"--output-format {o.output_format}: unknown format; choose one of {', '.join(FORMATS)}")
    if o.add_noqa and (o.fix or o.diff):
        raise UserError("--add-noqa cannot be combined with --fix, --fix-only or --diff; run them one after the other")
    if o.add_noqa and o.paths == ["-"]:
        raise UserError("--add-noqa needs files to write to, not stdin")


def _emit(text: str, output_file: Path | None, stream: TextIO) -> None:
    if output_file is None:
        stream.write(text)
        stream.flush()
        return
    try:
        output_file.parent.mkdir(parents=True, exist_ok=True)
        output_file.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"--output-file {output_file}: cannot write: {err.strerror or err}") from None


def _statistics(o: LintOptions, findings: list[Finding]) -> str:
    """Ruff's `--statistics`: one row per code, most frequent first."""
    from ddpcheck.findings import Applicability

    counts = Counter(f.code for f in findings)
    names = {f.code: f.name for f in findings}
    fixable = {f.code for f in findings if f.fix is not None
               and (o.unsafe_fixes or f.fix.applicability is Applicability.SAFE)}
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if o.output_format == "json":
        import json

        return json.dumps([{"code": code, "name": names[code], "count": n, "fixable": code in fixable}
                           for code, n in rows], indent=2) + "\n"
    if not rows:
        return ""
    width = len(str(rows[0][1]))
    return "".join(f"{n:>{width}}\t{code}\t{'[*] ' if code in fixable else ''}{names[code]}\n" for code, n in rows)


def _fix_listing(fixes: FixReport) -> str:
    """`--show-fixes`: what was fixed, per file and code (Ruff's layout)."""
    if not fixes.applied:
        return "No findings fixed.\n"
    n = len(fixes.applied)
    lines = [f"Fixed {n} finding{'s' if n != 1 else ''}:"]
    by_path: dict[str, Counter[tuple[str, str]]] = {}
    for f in fixes.applied:
        by_path.setdefault(f.path or "-", Counter())[(f.code, f.name)] += 1
    for path, counts in by_path.items():
        lines.append(f"- {path}:")
        for (code, name), count in sorted(counts.items()):
            lines.append(f"    {count} × {code} ({name})")
    return "\n".join(lines) + "\n"


def _fix_summary(o: LintOptions, fixes: FixReport) -> None:
    """One line on stderr about fixes, so that stdout stays the report (or the fixed text)."""
    n = len(fixes.applied)
    noun = f"{n} finding{'s' if n != 1 else ''}"
    if o.diff:
        print(f"Would fix {noun}." if n else "No findings would be fixed.", file=sys.stderr)
    elif o.fix and n and not o.show_fixes:
        print(f"Fixed {noun}.", file=sys.stderr)
    elif o.fix_only and not n:
        print("No findings fixed.", file=sys.stderr)


def _lint_stdin(o: LintOptions, resolver: SettingsResolver, known: Mapping[str, RuleInfo],
                fixes: FixReport) -> tuple[LintResult, TextIO]:
    """Lint (and fix) standard input. Returns the result and the stream the report goes to:
    with --fix the fixed text is standard output (Ruff's contract), so the report goes to stderr."""
    display = o.stdin_filename or "-"
    path = Path(o.stdin_filename or "stdin.py")
    result = LintResult()
    if o.stdin_filename and o.force_exclude and resolver.for_path(path).is_excluded(path):
        return result, sys.stdout
    try:
        source = decode_source(sys.stdin.buffer.read(), display)
    except ReadError as err:
        result.errors.append(err.error)
        return result, sys.stdout
    from ddpcheck.lint.model import Project

    facts = Project()
    try:
        findings = lint_text(display, path, source, resolver, facts, known)
    except Exception as err:  # noqa: BLE001 — a bug of ours: said for this input, like for a file
        result.errors.append(internal_error(display, err))
        if o.fix and not o.diff:
            sys.stdout.write(source)  # the text passes through unchanged, as with nothing to fix
            sys.stdout.flush()
            return result, sys.stderr
        return result, sys.stdout
    result.files = 1
    if o.fix or o.diff:
        try:
            fixed, findings, applied = _fix_until_stable(display, path, source, findings, resolver, facts,
                                                         known, o.unsafe_fixes)
        except Exception as err:  # noqa: BLE001 — as above; the unfixed text and findings stand
            result.errors.append(internal_error(display, err))
            fixed, applied = source, []
        fixes.applied.extend(applied)
        fixes.files = int(fixed != source)
        if o.diff:
            _print_diff(display, source, fixed)
        else:
            sys.stdout.write(fixed)
            sys.stdout.flush()
        result.sources[display] = fixed if not o.diff else source
        result.findings = findings
        return result, sys.stderr if not o.diff else sys.stdout
    result.sources[display] = source
    result.findings = findings
    return result, sys.stdout


def _fix_until_stable(display: str, path: Path, source: str, findings: list[Finding],
                      resolver: SettingsResolver, facts: Project, known: Mapping[str, RuleInfo],
                      unsafe: bool) -> tuple[str, list[Finding], list[Finding]]:
    """Apply fixes, re-lint, repeat until nothing more applies. Returns the text, the findings
    left, and the findings whose fixes were applied."""
    applied_all: list[Finding] = []
    for _ in range(MAX_FIX_PASSES):
        new, applied = apply_fixes(source, findings, unsafe=unsafe)
        if not applied or new == source:
            break
        applied_all.extend(applied)
        source = new
        findings = lint_text(display, path, source, resolver, facts, known)
    return source, findings, applied_all


def _print_diff(display: str, before: str, after: str) -> None:
    import difflib

    sys.stdout.writelines(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{display}", tofile=f"b/{display}"))
    sys.stdout.flush()


def _fix_files(result: LintResult, resolver: SettingsResolver, o: LintOptions, fixes: FixReport,
               known: Mapping[str, RuleInfo]) -> None:
    from ddpcheck.lint.model import Project

    facts = Project()
    remaining: list[Finding] = []
    by_path: dict[str, list[Finding]] = {}
    for f in result.findings:
        if f.path is None:  # no file, nothing to fix
            remaining.append(f)
            continue
        by_path.setdefault(f.path, []).append(f)
    for display, findings in by_path.items():
        if display not in result.sources:  # a line of a project module the linted files reach
            remaining.extend(findings)
            continue
        original = result.sources[display]
        path = Path(display)
        try:
            fixed, left, applied = _fix_until_stable(display, path, original, findings, resolver, facts,
                                                     known, o.unsafe_fixes)
        except Exception as err:  # noqa: BLE001 — a bug of ours in one file's fixes: it is left as it was
            result.errors.append(internal_error(display, err))
            remaining.extend(findings)
            continue
        if fixed == original:
            remaining.extend(findings)
            continue
        if o.diff:
            _print_diff(display, original, fixed)
            fixes.applied.extend(applied)
            fixes.files += 1
            remaining.extend(findings)
            continue
        try:
            _write_preserving(path, fixed)
        except OSError as err:
            result.errors.append(ToolError(display, f"cannot write fix: {err.strerror or err}"))
            remaining.extend(findings)
            continue
        fixes.applied.extend(applied)
        fixes.files += 1
        result.sources[display] = fixed
        remaining.extend(left)
    result.findings = sorted(remaining, key=Finding.sort_key)


def _add_noqa(result: LintResult) -> int:
    """`--add-noqa`: a `# noqa: CODE` on every reported line; reports nothing else."""
    from ddpcheck.lint.suppress import add_noqa

    for error in result.errors:
        print(f"ddpcheck: error: {error.line}", file=sys.stderr)
    by_path: dict[str, list[Finding]] = {}
    for f in result.findings:
        if f.path is not None:
            by_path.setdefault(f.path, []).append(f)
    added = 0
    for display, findings in by_path.items():
        source = result.sources.get(display)
        if source is None:  # a project module the linted files reach: the finding is shown there
            try:
                source = read_source(Path(display))
            except ReadError as err:
                print(f"ddpcheck: error: {err}", file=sys.stderr)
                return 2
        new, count = add_noqa(source, findings)
        if count and new != source:
            try:
                _write_preserving(Path(display), new)
            except OSError as err:
                print(f"ddpcheck: error: {display}: cannot write: {err.strerror or err}", file=sys.stderr)
                return 2
            added += count
    print(f"Added {added} noqa directive{'s' if added != 1 else ''}.", file=sys.stderr)
    return 2 if result.errors else 0


def _write_preserving(path: Path, text: str) -> None:
    """Write `text` in the file's own encoding and newline style, atomically."""
    import io
    import os
    import tempfile
    import tokenize

    raw = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError:  # a first line that is not UTF-8, read as such below
        encoding = "utf-8"
    if not strictly_decodable(raw, "utf-8" if encoding == "utf-8-sig" else encoding):
        # Read with the undecodable bytes of its comments replaced: writing would lose them.
        raise OSError(f"its comments are not valid {encoding}; save the file as UTF-8 to let ddpcheck edit it")
    bom = raw.startswith(b"\xef\xbb\xbf")
    data = text.encode("utf-8" if encoding == "utf-8-sig" else encoding)
    if bom and not data.startswith(b"\xef\xbb\xbf"):
        data = b"\xef\xbb\xbf" + data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".ddpcheck")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
