"""GitHub Actions workflow commands: one `::error`/`::warning`/`::notice` annotation per finding,
and one `::error` per file that could not be checked (or other failure of the run)."""

from __future__ import annotations

from collections.abc import Sequence

from ddpcheck.findings import Finding, Severity, ToolError
from ddpcheck.tool_codes import InternalError, UnreadableFile

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
_NAMES = {c.code: c.name for c in (UnreadableFile, InternalError)}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str,
           errors: Sequence[ToolError] = ()) -> str:
    out = []
    for f in findings:
        props = []
        if f.path:
            props.append(f"file={_prop(f.path)}")
            if f.line is not None:
                props.append(f"line={f.line}")
                props.append(f"col={f.column or 1}")
            if f.end_line is not None:
                props.append(f"endLine={f.end_line}")
                props.append(f"endColumn={f.end_column or 1}")
        props.append(f"title={_prop(f'ddpcheck ({f.code})')}")
        ranks = f" [ranks {','.join(map(str, f.ranks))}]" if f.ranks else ""
        out.append(f"::{_LEVEL[f.severity]} {','.join(props)}::{_data(f'{f.code} {f.name}: {f.message}{ranks}')}")
    for e in errors:
        props = [f"file={_prop(e.path)}"] if e.path else []
        props.append(f"title={_prop(f'ddpcheck ({e.code})' if e.code else 'ddpcheck')}")
        text = f"{e.code} {_NAMES.get(e.code, '')}: {e.message}" if e.code else e.message
        out.append(f"::error {','.join(props)}::{_data(text)}")
    return "\n".join(out) + ("\n" if out else "")
