"""Lint many files: read, pick the rules that apply to each, run the engine, collect one result.

A file that cannot be read (DDP902), or that ddpcheck itself fails on (DDP903, a bug), is an
error for that file (exit 2) but never stops the others; every report format lists it. Before any
parsing, files that cannot be relevant are skipped (lint/prefilter.py) and files whose cached
findings still hold are answered from the cache (lint/cache.py); the rest go to the engine, in
worker processes when there are enough of them (lint/parallel.py)."""

from __future__ import annotations

import io
import os
import sys
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ddpcheck.config import Settings, SettingsResolver
from ddpcheck.errors import UserError
from ddpcheck.findings import Finding, ToolError
from ddpcheck.lint.source_text import comments_only_undecodable
from ddpcheck.tool_codes import InternalError, SyntaxErrorInFile, UnreadableFile, UnusedNoqa

if TYPE_CHECKING:
    from ddpcheck.describe import RuleInfo
    from ddpcheck.lint.cache import LintCache
    from ddpcheck.lint.model import Project
    from ddpcheck.lint.parallel import Job
    from ddpcheck.lint.prefilter import ImportScan
    from ddpcheck.lint.rule import Rule


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)  # files not checked, fixes not written
    files: int = 0
    sources: dict[str, str] = field(default_factory=dict)  # path → text, for reporters and fixes


class ReadError(Exception):
    """A file that cannot be read or decoded; `error` says which and how."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.error = ToolError(path, message, UnreadableFile.code)


def internal_error(path: str | None, err: BaseException) -> ToolError:
    """The error for a file ddpcheck failed on in this process (a bug of ours)."""
    import traceback

    return internal_error_of(path, type(err).__name__, str(err), "".join(traceback.format_exception(err)))


def internal_error_of(path: str | None, kind: str, text: str, trace: str) -> ToolError:
    """The same from what was raised and its formatted traceback (a worker process's does not
    survive the way back); with DDPCHECK_DEBUG set the traceback goes to standard error."""
    if os.environ.get("DDPCHECK_DEBUG"):
        sys.stderr.write(trace)
    what = f"{kind}: {' '.join(text.split())}" if text.strip() else kind
    return ToolError(path, f"internal error in ddpcheck: {what}; please report it "
                           "(DDPCHECK_DEBUG=1 shows the traceback)", InternalError.code)


def read_source(path: Path) -> str:
    """The file's text, decoded as Python would (PEP 263 declaration, else UTF-8)."""
    return decode_source(read_bytes(path), str(path))


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ReadError(str(path), f"cannot read: {err.strerror or err}") from None


def decode_source(data: bytes, name: str) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as err:
        if "encoding" in str(err) and "declaration" in str(err) and b"coding" in data[:200]:
            raise ReadError(name, f"cannot read: {err}") from None
        encoding = "utf-8"  # undecodable first lines: say where, below
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as err:
        # Python imports a module whose comments only are not UTF-8: so is it read here.
        lenient = comments_only_undecodable(data) if encoding in ("utf-8", "utf-8-sig") else None
        if lenient is not None:
            return lenient
        where = f" (byte {data[err.start]:#04x} at offset {err.start})" if isinstance(err, UnicodeDecodeError) else ""
        raise ReadError(name, f"cannot read: not valid {encoding}{where}; save the file as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def rules_for(settings: Settings, path: Path, known: Mapping[str, RuleInfo]) -> list[type[Rule]]:
    from ddpcheck.lint.rules import rule_classes

    enabled = settings.codes_for(path, known)
    return [r for r in rule_classes() if r.code in enabled]


def syntax_enabled(settings: Settings, path: Path, known: Mapping[str, RuleInfo]) -> bool:
    return SyntaxErrorInFile.code in settings.codes_for(path, known)


def lint_text(display: str, path: Path, source: str, resolver: SettingsResolver,
              facts: Project, known: Mapping[str, RuleInfo]) -> list[Finding]:
    from ddpcheck.lint.engine import lint_source

    from ddpcheck.lint import suppress

    settings = resolver.for_path(path)
    findings = lint_source(display, source, rules_for(settings, path, known), facts, noqa=False)
    if not syntax_enabled(settings, path, known):
        findings = [f for f in findings if f.code != SyntaxErrorInFile.code]
    shown: dict[str, list[Finding]] = {}
    for f in findings:
        if f.path is not None and f.path != display:
            shown.setdefault(f.path, []).append(f)
    own = [f for f in findings if f.path is None or f.path == display]
    kept = suppress.settle(display, source, own, settings.codes_for(path, known), known)
    for other, found in shown.items():
        try:
            kept += suppress.apply(read_source(Path(other)), found)
        except ReadError:
            kept += found
    return sorted(kept, key=Finding.sort_key)


def lint_files(files: list[Path], resolver: SettingsResolver, *, jobs: int | None = None,
               cache: LintCache | None = None, known: Mapping[str, RuleInfo] | None = None) -> LintResult:
    """Lint `files`; `jobs` worker processes (None: automatic), `cache` to reuse findings."""
    from ddpcheck.lint import parallel
    from ddpcheck.lint.prefilter import ImportScan, absolute

    if known is None:
        from ddpcheck.catalog import lint_codes

        known = lint_codes()
    result = LintResult()
    read: dict[Path, tuple[bytes, str]] = {}  # resolved path → bytes and text, files and helpers
    items = []
    for path in files:
        display = str(path)
        try:
            data = read_bytes(path)
            source = decode_source(data, display)
        except ReadError as err:
            result.errors.append(err.error)
            continue
        result.files += 1
        result.sources[display] = source
        read[absolute(path)] = (data, source)
        items.append((display, path, data, source))

    def helper(path: Path) -> tuple[bytes, str]:
        if path not in read:
            try:
                data = path.read_bytes()
                read[path] = (data, data.decode("utf-8", "replace"))
            except OSError:
                read[path] = (b"", "")
        return read[path]

    scan = ImportScan(lambda p: helper(p)[1])
    static = frozenset(c for c, info in known.items() if info.kind == "lint")
    todo: list[tuple[parallel.Job, str | None]] = []
    raw = _Raw()
    failed: set[str] = set()
    for display, path, data, source in items:
        try:
            prepared = _prepare(display, path, data, source, resolver, known, static, scan, helper, cache, raw, result)
        except UserError:
            raise  # a broken configuration: one line for the whole run, as when a folder is linted
        except Exception as err:  # noqa: BLE001 — a bug of ours on one file; the others go on
            result.errors.append(internal_error(display, err))
            failed.add(display)
            continue
        if prepared is not None:
            todo.append(prepared)
    workers = parallel.worker_count(jobs, len(todo))
    outputs = parallel.lint_jobs([job for job, _ in todo], workers)
    for (job, entry), output in zip(todo, outputs):
        if isinstance(output, parallel.Failure):
            result.errors.append(internal_error_of(job.display, output.kind, output.text, output.trace))
            failed.add(job.display)
            continue
        if cache is not None and entry is not None:
            cache.put(entry, output)
        raw.add(job.display, job.source, job.codes, output)
    try:
        result.findings += raw.settle(lambda display: helper(absolute(Path(display)))[1], known)
    except Exception as err:  # noqa: BLE001 — no file's findings can be trusted to be complete
        result.errors.append(internal_error(None, err))
    for display in failed:
        result.sources.pop(display, None)  # not checked: no report may show it as clean
    result.findings = _shown_where_allowed(_unique(result.findings), set(result.sources), resolver, known)
    return result


def _prepare(display: str, path: Path, data: bytes, source: str, resolver: SettingsResolver,
             known: Mapping[str, RuleInfo], static: frozenset[str], scan: ImportScan,
             helper: Callable[[Path], tuple[bytes, str]], cache: LintCache | None, raw: _Raw,
             result: LintResult) -> tuple[Job, str | None] | None:
    """The engine job for one file, or None when the file is answered here: no rule can fire
    (prefilter), or the cache holds its findings."""
    from ddpcheck.lint import parallel

    relevant = scan.relevant(path, source)
    settings = resolver.for_path(path)
    syntax = syntax_enabled(settings, path, known)
    verdict = None if relevant or not syntax else _compiles(display, source)
    codes = settings.codes_for(path, known)
    if not relevant and verdict is not None:
        # No rule can fire: no libcst parse. Syntax errors are still reported, from CPython's
        # own parser (about a fifth of libcst's cost).
        if verdict is False:
            from ddpcheck.lint.engine import _syntax_finding

            result.findings.append(_syntax_finding(display, source, None))
        elif UnusedNoqa.code in codes and "noqa" in source.lower():
            raw.add(display, source, codes, [])
        return None
    if not (codes & static) and not syntax and UnusedNoqa.code not in codes:
        return None
    entry = None
    if cache is not None:
        from ddpcheck.lint.cache import key

        deps = [helper(dep)[0] for dep in scan.dependencies(path, source)]
        entry = key(display, data, codes, syntax, deps)
        hit = cache.get(entry)
        if hit is not None:
            raw.add(display, source, codes, hit)
            return None
    return parallel.Job(display, str(path), source, codes, syntax), entry


class _Raw:
    """Findings before `# noqa`, gathered from every linted file, settled together: a finding
    one file's lint shows in another file (a helper it calls) is suppressed by that file's
    `# noqa`, and uses it (a directive is unused, DDP901, only when no file's finding used it)."""

    def __init__(self) -> None:
        self.linted: dict[str, tuple[str, frozenset[str]]] = {}  # display → text, enabled codes
        self.at: dict[str, list[Finding]] = {}  # path a finding is shown at → its findings

    def add(self, display: str, source: str, codes: frozenset[str], findings: list[Finding]) -> None:
        self.linted[display] = (source, codes)
        self.at.setdefault(display, [])
        for f in findings:
            self.at.setdefault(f.path if f.path is not None else display, []).append(f)

    def settle(self, text_of: Callable[[str], str], known: Mapping[str, RuleInfo]) -> list[Finding]:
        from ddpcheck.lint import suppress

        out: list[Finding] = []
        for path, findings in self.at.items():
            if path in self.linted:
                source, codes = self.linted[path]
                out += suppress.settle(path, source, findings, codes, known)
            else:
                out += suppress.apply(text_of(path), findings)
        return out


def _shown_where_allowed(findings: list[Finding], linted: set[str], resolver: SettingsResolver,
                         known: Mapping[str, RuleInfo]) -> list[Finding]:
    """A finding shown in a project module that was not linted itself (the helper where the
    linted script's `init_process_group` runs) obeys that module's settings, as if it had been
    linted: its selection and per-file-ignores, and its exclusion. (Its `# noqa` comments are
    applied by the engine.)"""
    allowed: dict[str, frozenset[str]] = {}
    out = []
    for f in findings:
        if f.path is None or f.path in linted:
            out.append(f)
            continue
        codes = allowed.get(f.path)
        if codes is None:
            path = Path(f.path)
            settings = resolver.for_path(path)
            codes = frozenset() if settings.is_excluded(path) else settings.codes_for(path, known)
            allowed[f.path] = codes
        if f.code in codes:
            out.append(f)
    return out


def _unique(findings: list[Finding]) -> list[Finding]:
    """Sorted, each finding once: a line of a project module that several linted files reach
    (a helper's `torch.save` every script calls on every rank) is reported once."""
    seen: set[tuple[object, ...]] = set()
    out = []
    for f in sorted(findings, key=Finding.sort_key):
        key = (f.path, f.line, f.column, f.code, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _compiles(display: str, source: str) -> bool | None:
    """Whether CPython parses `source`; None when it cannot tell (null bytes, deep nesting):
    the engine then parses the file and words the error."""
    import ast

    try:
        compile(source, display, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError:
        return False
    except (ValueError, RecursionError, MemoryError):
        return None
    return True
