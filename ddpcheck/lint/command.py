"""`ddpcheck lint` from options to exit code: discover, lint, fix, report."""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from pathlib import Path

from ddpcheck.catalog import all_rules
from ddpcheck.config import Selection, SettingsResolver, describe, validate_codes
from ddpcheck.errors import UserError
from ddpcheck.findings import Finding
from ddpcheck.lint.files import discover
from ddpcheck.lint.fixes import apply_fixes
from ddpcheck.lint.runner import LintResult, ReadError, decode_source, lint_files, lint_text
from ddpcheck.report import FORMATS, render

MAX_FIX_PASSES = 10


@dataclass(frozen=True)
class LintOptions:
    paths: list[str]
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    config: Path | None = None
    output_format: str = "full"
    exit_zero: bool = False
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    force_exclude: bool = False
    stdin_filename: str | None = None
    show_settings: bool = False
    color: bool = False
    jobs: int | None = None  # worker processes; None: automatic
    no_cache: bool = False


def run_lint(o: LintOptions) -> int:
    if o.output_format not in FORMATS:
        raise UserError(f"--output-format {o.output_format}: unknown format; choose one of {', '.join(FORMATS)}")
    if o.no_cache:
        known = all_rules()
    else:
        from ddpcheck.lint.cache import catalog, cache_root

        known = catalog(cache_root())  # a fully cached run never imports the rules (nor libcst)
    overrides = Selection(
        select=None if o.select is None else validate_codes(o.select, "--select", known),
        extend_select=validate_codes(o.extend_select, "--extend-select", known),
        ignore=validate_codes(o.ignore, "--ignore", known),
    )
    resolver = SettingsResolver(known, config=o.config, overrides=overrides,
                                exclude=o.exclude, extend_exclude=o.extend_exclude)
    if o.show_settings:
        target = Path(o.stdin_filename if o.paths == ["-"] and o.stdin_filename else o.paths[0])
        print(describe(resolver.for_path(target), known, target))
        return 0

    if o.paths == ["-"]:
        result = _lint_stdin(o, resolver, known)
    else:
        if "-" in o.paths:
            raise UserError("`-` (stdin) cannot be combined with other paths")
        found = discover(o.paths, resolver, force_exclude=o.force_exclude)
        if o.jobs is not None and o.jobs < 1:
            raise UserError(f"--jobs {o.jobs}: must be at least 1 (leave it out to use every CPU)")
        cache = None
        if not o.no_cache:
            from ddpcheck.lint.cache import LintCache, cache_root

            cache = LintCache(cache_root())
        result = lint_files(list(found.files), resolver, jobs=o.jobs, cache=cache, known=known)
        result.errors[:0] = found.errors
        if o.fix or o.diff:
            _fix_files(result, resolver, o)

    for line in result.errors:
        print(f"ddpcheck: error: {line}", file=sys.stderr)
    text = render(o.output_format, result.findings, sources=result.sources, color=o.color)
    sys.stdout.write(text)
    sys.stdout.flush()
    if result.errors:
        return 2
    if result.findings and not o.exit_zero:
        return 1
    return 0


def _lint_stdin(o: LintOptions, resolver: SettingsResolver, known: dict) -> LintResult:
    display = o.stdin_filename or "-"
    path = Path(o.stdin_filename or "stdin.py")
    result = LintResult()
    if o.stdin_filename and o.force_exclude and resolver.for_path(path).is_excluded(path):
        return result
    try:
        source = decode_source(sys.stdin.buffer.read(), display)
    except ReadError as err:
        result.errors.append(str(err))
        return result
    from ddpcheck.lint.model import Project

    facts = Project()
    findings = lint_text(display, path, source, resolver, facts, known)
    if o.fix and not o.diff:
        fixed, findings = _fix_until_stable(display, path, source, findings, resolver, facts, known, o.unsafe_fixes)
        sys.stdout.write(fixed)  # Ruff's contract: with --fix, stdin's fixed text goes to stdout
        sys.stdout.flush()
        result.files = 1
        result.findings = findings
        result.sources[display] = fixed
        # Findings go to stderr so that stdout stays the file.
        sys.stdout = sys.stderr
        return result
    result.files = 1
    result.sources[display] = source
    result.findings = findings
    return result


def _fix_until_stable(display, path, source, findings, resolver, facts, known, unsafe):
    """Apply fixes, re-lint, repeat until nothing more applies; return the text and what remains."""
    for _ in range(MAX_FIX_PASSES):
        new, applied = apply_fixes(source, findings, unsafe=unsafe)
        if not applied or new == source:
            break
        source = new
        findings = lint_text(display, path, source, resolver, facts, known)
    return source, findings


def _fix_files(result: LintResult, resolver: SettingsResolver, o: LintOptions) -> None:
    from ddpcheck.lint.model import Project

    known = all_rules()
    facts = Project()
    remaining: list[Finding] = []
    by_path: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_path.setdefault(f.path, []).append(f)
    fixed_count = 0
    for display, findings in by_path.items():
        original = result.sources[display]
        path = Path(display)
        fixed, left = _fix_until_stable(display, path, original, findings, resolver, facts, known, o.unsafe_fixes)
        if fixed != original:
            fixed_count += len(findings) - len([f for f in left if f.code in {g.code for g in findings}])
            if o.diff:
                sys.stdout.writelines(difflib.unified_diff(
                    original.splitlines(keepends=True), fixed.splitlines(keepends=True),
                    fromfile=f"a/{display}", tofile=f"b/{display}"))
                remaining.extend(findings)
                continue
            try:
                _write_preserving(path, fixed)
            except OSError as err:
                result.errors.append(f"{display}: cannot write fix: {err.strerror or err}")
                remaining.extend(findings)
                continue
            result.sources[display] = fixed
            remaining.extend(left)
        else:
            remaining.extend(findings)
    result.findings = sorted(remaining, key=Finding.sort_key)
    if o.fix and not o.diff and fixed_count:
        print(f"Fixed {fixed_count} finding{'s' if fixed_count != 1 else ''}.", file=sys.stderr)


def _write_preserving(path: Path, text: str) -> None:
    """Write `text` in the file's own encoding and newline style, atomically."""
    import io
    import os
    import tempfile
    import tokenize

    raw = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
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
