"""What every code carries — the base its classes subclass, the registry they land in, and the
page made from it.

A leaf module: it imports nothing of ddpcheck but `findings`, so rule modules, runtime check
modules and the catalog that collects them can all import it without a circle. Torch-free and
libcst-free: `ddpcheck rules` and `explain` stay light.

A class that sets `code` registers itself when it is defined: the code is written once, on the
class, and there is one registry for static rules, runtime checks and ddpcheck's own codes.
ddpcheck/catalog.py decides which modules to load and answers questions about the result.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import ClassVar, Protocol, Sequence

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


class Reported(Protocol):
    """An example a static rule must report, with where (lint/rule.py's `Invalid`)."""

    @property
    def code(self) -> str: ...


_REGISTRY: dict[str, type[Described]] = {}


def registered() -> dict[str, type[Described]]:
    """Code → class for every class with a code defined so far, in definition order."""
    return dict(_REGISTRY)


class Described:
    """Base for anything with a code. Subclasses set the class attributes; the docstring is the doc:
    its first paragraph is the one-line summary, the rest is Markdown (`## Why it matters`,
    `## How to fix`, `## References`). A subclass that sets `code` registers itself."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in vars(cls):
            return  # an abstract base (Rule, RuntimeCheck, Incident)
        code = cls.code
        if not re.fullmatch(r"DDP\d{3}", code):
            raise RuntimeError(f"bad rule code {code!r} on {cls.__qualname__}")
        earlier = _REGISTRY.get(code)
        # The same class defined again (a module reloaded) replaces itself; another class may not.
        if earlier is not None and (earlier.__module__, earlier.__qualname__) != (cls.__module__, cls.__qualname__):
            raise RuntimeError(f"duplicate rule code {code}: {earlier.name} and {cls.name}")
        _REGISTRY[code] = cls

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = Severity.WARNING
    default_enabled: ClassVar[bool] = True
    fixable: ClassVar[bool] = False
    kind: ClassVar[str] = "lint"
    # Examples, as for every code: INVALID programs are reported, VALID ones are not. The first of
    # each is the page's pair ("Example that is reported", "The same, done right").
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[str | Reported]] = ()

    @classmethod
    def info(cls) -> RuleInfo:
        doc = inspect.cleandoc(cls.__doc__ or "")
        summary, _, body = doc.partition("\n\n")
        bad = cls.INVALID[0] if cls.INVALID else ""
        good = cls.VALID[0] if cls.VALID else ""
        return RuleInfo(
            code=cls.code,
            name=cls.name,
            summary=" ".join(summary.split()),
            severity=cls.severity,
            kind=cls.kind,
            default_enabled=cls.default_enabled,
            fixable=cls.fixable,
            body=body.strip(),
            bad=textwrap.dedent(bad if isinstance(bad, str) else bad.code).strip("\n"),
            good=textwrap.dedent(good).strip("\n"),
        )


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
