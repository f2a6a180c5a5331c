"""JSON output. Schema (version 1, stable; documented in docs/usage.md, "JSON output"):

    {"schema_version": 1, "tool": "ddpcheck", "version": "...", "command": "lint" | "run" | "trace",
     "findings": [Finding.to_dict(), ...],
     "errors": [{"path": ..., "code": "DDP902" | "DDP903" | null, "message": ...}, ...],
     "summary": {"total": N, "by_code": {"DDP001": n, ...}}}

`errors` lists the files that could not be checked (DDP902: unreadable; DDP903: ddpcheck failed
on it) and other failures of the run (code null, e.g. a fix that could not be written). Empty
`findings` means clean only when `errors` is empty too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ddpcheck import __version__
from ddpcheck.findings import Finding, ToolError


def document(findings: list[Finding], tool: str, errors: Sequence[ToolError] = ()) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "tool": "ddpcheck",
        "version": __version__,
        "command": tool,
        "findings": [f.to_dict() for f in findings],
        "errors": [e.to_dict() for e in errors],
        "summary": {"total": len(findings), "by_code": dict(sorted(Counter(f.code for f in findings).items()))},
    }


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str,
           errors: Sequence[ToolError] = ()) -> str:
    return json.dumps(document(findings, tool, errors), indent=2) + "\n"
