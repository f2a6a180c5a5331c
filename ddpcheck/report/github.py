"""GitHub Actions workflow commands: one `::error`/`::warning`/`::notice` annotation per finding."""

from __future__ import annotations

from ddpcheck.findings import Finding, Severity

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str) -> str:
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
    return "\n".join(out) + ("\n" if out else "")
