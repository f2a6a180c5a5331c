"""JSON output. Schema (version 1, stable; documented in README "JSON output"):

    {"schema_version": 1, "tool": "ddpcheck", "version": "...", "command": "lint" | "run",
     "findings": [Finding.to_dict(), ...],
     "summary": {"total": N, "by_code": {"DDP001": n, ...}}}
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ddpcheck import __version__
from ddpcheck.findings import Finding


def document(findings: list[Finding], tool: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "tool": "ddpcheck",
        "version": __version__,
        "command": tool,
        "findings": [f.to_dict() for f in findings],
        "summary": {"total": len(findings), "by_code": dict(sorted(Counter(f.code for f in findings).items()))},
    }


def render(findings: list[Finding], *, sources: dict[str, str], color: bool, tool: str) -> str:
    return json.dumps(document(findings, tool), indent=2) + "\n"
