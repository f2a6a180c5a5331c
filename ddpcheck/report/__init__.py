"""Reporters shared by `lint` and `run`: one module per output format, each a `render` function
from findings to text. Formats are looked up by name, so adding one is adding a module."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Protocol, cast

from ddpcheck.errors import UserError
from ddpcheck.findings import Finding, ToolError

FORMATS = ("full", "concise", "json", "github", "sarif", "junit")
_MODULES = {"json": "json_format"}


class Renderer(Protocol):
    """What every format module's `render` is."""

    def __call__(self, findings: list[Finding], *, sources: dict[str, str], color: bool,
                 tool: str, errors: Sequence[ToolError]) -> str: ...


def render(fmt: str, findings: list[Finding], *, sources: dict[str, str] | None = None,
           color: bool = False, tool: str = "lint", errors: Sequence[ToolError] = ()) -> str:
    """The report text. `sources` (path → text) lets `full` show the offending lines; `tool` is
    "lint" or "run" (some formats name the run they describe). `errors`: files that could not be
    checked and other failures of the run; every format shows them in its own way for tool
    errors (they are on standard error too), so a file not checked never reads as clean."""
    if fmt not in FORMATS:
        raise UserError(f"--output-format {fmt}: unknown format; choose one of {', '.join(FORMATS)}")
    module = importlib.import_module(f"ddpcheck.report.{_MODULES.get(fmt, fmt)}")
    # Looked up by name, so the checker cannot see the module; every format defines a Renderer.
    format_render = cast(Renderer, module.render)
    return format_render(findings, sources=sources or {}, color=color, tool=tool, errors=errors)
