"""Every code ddpcheck can report — static rules, runtime checks, tool diagnostics — and its page.

Metadata lives on classes whose docstring is the user documentation (Fixit's style). This module
never imports torch or libcst: `ddpcheck rules`, `explain` and code validation stay light.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from ddpcheck.findings import Severity

DOCS_URL = "https://github.com/ddpcheck/ddpcheck/blob/main/rules/{code}.md"


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    summary: str
    severity: Severity
    kind: str  # "lint" (static rule), "run" (runtime check) or "tool" (ddpcheck's own diagnostics)
    default_enabled: bool
    fixable: bool
    body: str  # Markdown after the summary: why it matters, how to fix, references
    bad: str  # an example that is reported
    good: str  # the same program, right

    @property
    def url(self) -> str:
        return DOCS_URL.format(code=self.code)


class Described:
    """Base for anything with a code. Subclasses set the class attributes; the docstring is the doc:
    its first paragraph is the one-line summary, the rest is Markdown (`## Why it matters`,
    `## How to fix`, `## References`)."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = Severity.WARNING
    default_enabled: ClassVar[bool] = True
    fixable: ClassVar[bool] = False
    kind: ClassVar[str] = "lint"
    BAD: ClassVar[str] = ""
    GOOD: ClassVar[str] = ""

    @classmethod
    def info(cls) -> RuleInfo:
        doc = inspect.cleandoc(cls.__doc__ or "")
        summary, _, body = doc.partition("\n\n")
        return RuleInfo(
            code=cls.code,
            name=cls.name,
            summary=" ".join(summary.split()),
            severity=cls.severity,
            kind=cls.kind,
            default_enabled=cls.default_enabled,
            fixable=cls.fixable,
            body=body.strip(),
            bad=textwrap.dedent(cls.BAD).strip("\n"),
            good=textwrap.dedent(cls.GOOD).strip("\n"),
        )


def _subclasses_in(package: str, base: type) -> list[type]:
    """Import every module of `package` and return the concrete subclasses of `base` defined there."""
    pkg = importlib.import_module(package)
    found = []
    for mod in pkgutil.iter_modules(pkg.__path__, package + "."):
        module = importlib.import_module(mod.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, base)
                and obj.__module__ == module.__name__
                and "code" in vars(obj)
            ):
                found.append(obj)
    return found


@lru_cache(maxsize=1)
def all_rules() -> dict[str, RuleInfo]:
    """Code → RuleInfo for everything, sorted by code."""
    from ddpcheck.lint.rule import Rule
    from ddpcheck.lint.tool_codes import TOOL_CODES
    from ddpcheck.run.registry import RuntimeCheck

    infos = [c.info() for c in _subclasses_in("ddpcheck.lint.rules", Rule)]
    infos += [c.info() for c in _subclasses_in("ddpcheck.run.checks", RuntimeCheck)]
    infos += [c.info() for c in TOOL_CODES]
    by_code: dict[str, RuleInfo] = {}
    for info in infos:
        if info.code in by_code:
            raise RuntimeError(f"duplicate rule code {info.code}: {info.name} and {by_code[info.code].name}")
        if not re.fullmatch(r"DDP\d{3}", info.code):
            raise RuntimeError(f"bad rule code {info.code!r} on {info.name}")
        by_code[info.code] = info
    return dict(sorted(by_code.items()))


def render_page(info: RuleInfo) -> str:
    """The Markdown page for one code: what `ddpcheck explain` prints and what rules/CODE.md holds."""
    kind = {"lint": "static rule (`ddpcheck lint`)", "run": "runtime check (`ddpcheck run`)",
            "tool": "ddpcheck diagnostic"}[info.kind]
    lines = [
        f"# {info.code} `{info.name}`",
        "",
        info.summary,
        "",
        f"- Kind: {kind}",
        f"- Severity: {info.severity.value}",
        f"- Default: {'on' if info.default_enabled else 'off (enable with `--extend-select ' + info.code + '`)'}",
        f"- Fixable: {'yes' if info.fixable else 'no'}",
        "",
    ]
    if info.body:
        lines += [info.body, ""]
    if info.bad:
        lines += ["## Example that is reported", "", "```python", info.bad, "```", ""]
    if info.good:
        lines += ["## The same, done right", "", "```python", info.good, "```", ""]
    return "\n".join(lines).rstrip() + "\n"
