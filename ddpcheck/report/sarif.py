"""SARIF 2.1.0 for code scanning. Each rule carries its help text and page link; each result a
fingerprint built from the code, the path and the text of the offending line (not its number),
so alerts survive unrelated edits above them. A file that could not be checked is not a result:
it is a tool execution notification of the run's invocation, which then did not succeed."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpcheck import __version__
from ddpcheck.catalog import RuleInfo, all_rules
from ddpcheck.findings import Finding, Severity, ToolError

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule_descriptor(info: RuleInfo) -> dict[str, object]:
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "fullDescription": {"text": info.summary},
        "helpUri": info.url,
        "help": {"text": f"{info.summary} See {info.url}",
                 "markdown": f"{info.body or info.summary}\n\n[{info.code} {info.name}]({info.url})"},
        "defaultConfiguration": {"level": _LEVEL[info.severity], "enabled": info.default_enabled},
        "properties": {"kind": info.kind, "fixable": info.fixable, "tags": ["ddp", info.kind]},
    }


def _fingerprint(f: Finding, sources: dict[str, str], occurrence: int) -> str:
    line_text = ""
    if f.path and f.line and f.path in sources:
        lines = sources[f.path].splitlines()
        if 0 < f.line <= len(lines):
            line_text = " ".join(lines[f.line - 1].split())
    # The path as uploaded (relative to the checkout), so `lint .` and `lint $PWD` agree.
    where = _artifact_location(f.path)["uri"] if f.path else ""
    key = "\0".join([f.code, where, line_text or f.message, str(occurrence)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _artifact_location(path: str) -> dict[str, str]:
    """Code scanning wants paths relative to the checkout (%SRCROOT%, the working directory);
    a file outside it gets an absolute file: URI instead."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            return {"uri": p.as_uri()}
    return {"uri": p.as_posix(), "uriBaseId": "%SRCROOT%"}


def document(findings: list[Finding], sources: dict[str, str], tool: str,
             errors: Sequence[ToolError] = ()) -> dict[str, Any]:
    known = all_rules()
    used = sorted(c for c in {f.code for f in findings} | ({c for c, i in known.items() if i.kind in ("lint", "tool")} if tool == "lint" else set())
                  if c in known)  # ruleIndex must point into the rules listed
    index = {code: i for i, code in enumerate(used)}
    rules = [_rule_descriptor(known[c]) for c in used if c in known]
    seen: Counter[tuple[str, str | None, str | int | None]] = Counter()
    results: list[dict[str, object]] = []
    for f in findings:
        result: dict[str, object] = {
            "ruleId": f.code,
            "level": _LEVEL[f.severity],
            "message": {"text": f.message},
        }
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        if f.path:
            region: dict[str, int] = {}
            if f.line is not None:
                region = {"startLine": f.line, "startColumn": f.column or 1}
                if f.end_line is not None:
                    region.update(endLine=f.end_line, endColumn=f.end_column or 1)
            physical: dict[str, object] = {"artifactLocation": _artifact_location(f.path)}
            if region:
                physical["region"] = region
            result["locations"] = [{"physicalLocation": physical}]
        base = (f.code, f.path, f.line and _fingerprint(f, sources, 0))
        result["partialFingerprints"] = {"ddpcheck/v1": _fingerprint(f, sources, seen[base])}
        seen[base] += 1
        if f.related:
            result["relatedLocations"] = [
                {
                    "id": number,
                    "message": {"text": r.message},
                    "physicalLocation": {
                        "artifactLocation": _artifact_location(r.path),
                        "region": {"startLine": r.line, "startColumn": r.column},
                    },
                }
                for number, r in enumerate(f.related)
            ]
        if f.ranks:
            result["properties"] = {"ranks": list(f.ranks)}
        results.append(result)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ddpcheck",
                        "version": __version__,
                        "informationUri": "https://github.com/ddpcheck/ddpcheck",
                        "rules": rules,
                    }
                },
                "invocations": [_invocation(errors, index)],
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().resolve().as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def _invocation(errors: Sequence[ToolError], index: dict[str, int]) -> dict[str, object]:
    """The run as SARIF sees it: successful only when every file could be checked."""
    notifications: list[dict[str, object]] = []
    for e in errors:
        note: dict[str, object] = {"level": "error", "message": {"text": e.message}}
        if e.path:
            note["locations"] = [{"physicalLocation": {"artifactLocation": _artifact_location(e.path)}}]
        if e.code is not None:
            rule: dict[str, object] = {"id": e.code}
            if e.code in index:
                rule["index"] = index[e.code]
            note["associatedRule"] = rule
        notifications.append(note)
    return {"executionSuccessful": not errors, "toolExecutionNotifications": notifications}


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str,
           errors: Sequence[ToolError] = ()) -> str:
    return json.dumps(document(findings, sources, tool, errors), indent=2) + "\n"
