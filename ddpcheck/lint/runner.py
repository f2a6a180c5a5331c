"""Lint many files: read, pick the rules that apply to each, run the engine, collect one result.

A file that cannot be read is an error line (exit 2) but never stops the others."""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from ddpcheck.catalog import all_rules
from ddpcheck.config import Settings, SettingsResolver
from ddpcheck.findings import Finding
from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.facts import ProjectFacts
from ddpcheck.lint.rules import rule_classes
from ddpcheck.lint.tool_codes import SyntaxErrorInFile


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line each, already worded for the user
    files: int = 0
    sources: dict[str, str] = field(default_factory=dict)  # path → text, for reporters and fixes


class ReadError(Exception):
    pass


def read_source(path: Path) -> str:
    """The file's text, decoded as Python would (PEP 263 declaration, else UTF-8)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ReadError(f"{path}: cannot read: {err.strerror or err}") from None
    return decode_source(data, str(path))


def decode_source(data: bytes, name: str) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as err:
        if "encoding" in str(err) and "declaration" in str(err) and b"coding" in data[:200]:
            raise ReadError(f"{name}: cannot read: {err}") from None
        encoding = "utf-8"  # undecodable first lines: say where, below
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as err:
        where = f" (byte {data[err.start]:#04x} at offset {err.start})" if isinstance(err, UnicodeDecodeError) else ""
        raise ReadError(f"{name}: cannot read: not valid {encoding}{where}; save the file as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def rules_for(settings: Settings, path: Path, known: dict) -> list[type]:
    enabled = settings.codes_for(path, known)
    return [r for r in rule_classes() if r.code in enabled]


def syntax_enabled(settings: Settings, path: Path, known: dict) -> bool:
    return SyntaxErrorInFile.code in settings.codes_for(path, known)


def lint_text(display: str, path: Path, source: str, resolver: SettingsResolver,
              facts: ProjectFacts, known: dict) -> list[Finding]:
    settings = resolver.for_path(path)
    findings = lint_source(display, source, rules_for(settings, path, known), facts)
    if not syntax_enabled(settings, path, known):
        findings = [f for f in findings if f.code != SyntaxErrorInFile.code]
    return findings


def lint_files(files: list[Path], resolver: SettingsResolver) -> LintResult:
    known = all_rules()
    facts = ProjectFacts()
    result = LintResult()
    for path in files:
        display = str(path)
        try:
            source = read_source(path)
        except ReadError as err:
            result.errors.append(str(err))
            continue
        result.files += 1
        result.sources[display] = source
        result.findings.extend(lint_text(display, path, source, resolver, facts, known))
    result.findings.sort(key=Finding.sort_key)
    return result
