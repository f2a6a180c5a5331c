"""The base class of static rules.

A rule is one module in ddpcheck/lint/rules/, one `Rule` subclass named for what it catches.
Its docstring is its documentation page; `VALID` and `INVALID` examples sit beside the logic and
tests/test_rule_examples.py turns each into a test. Rules are discovered, never registered.

Hooks a rule may define (all optional); the engine calls them during its single traversal:
- `visit_<Node>(self, node)` / `leave_<Node>(self, node)` for any libcst node type;
- `on_call(self, call: CallSite)` for every call, with its scope, loops, guards and with-blocks;
- `finish(self)` after the traversal, when `self.ctx` holds every call and assignment of the file.
Rules report with `self.report(node, message=None, fix=None)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import libcst as cst

from ddpcheck.catalog import Described
from ddpcheck.findings import Applicability
from ddpcheck.lint.context import FileContext, Pending


@dataclass(frozen=True)
class Invalid:
    """An example the rule must report. `line`: the 1-based line of the finding, if pinned;
    `fixed`: the source after applying the rule's fix, for fixable rules."""

    code: str
    line: int | None = None
    fixed: str | None = None


@dataclass(frozen=True)
class Replace:
    """A fix: replace `node` by `new` (a libcst node), described for the user."""

    node: cst.CSTNode
    new: cst.CSTNode
    description: str
    applicability: Applicability = Applicability.UNSAFE


class Rule(Described):
    kind: ClassVar[str] = "lint"
    MESSAGE: ClassVar[str] = ""  # default message: says what is wrong and what to do
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Invalid | str]] = ()

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def on_call(self, call) -> None:
        """Called for every call in the file, in source order (see CallSite)."""

    def finish(self) -> None:
        """Called once after the traversal."""

    def report(self, node: cst.CSTNode, message: str | None = None, fix: Replace | None = None) -> None:
        self.ctx.pending.append(Pending(type(self), node, message or self.MESSAGE, fix))

    @classmethod
    def info(cls):
        info = super().info()
        if info.bad or info.good:
            return info
        # The first examples double as the page's bad/good pair.
        from dataclasses import replace
        import textwrap

        bad = cls.INVALID[0] if cls.INVALID else ""
        bad = bad.code if isinstance(bad, Invalid) else bad
        good = cls.VALID[0] if cls.VALID else ""
        return replace(info, bad=textwrap.dedent(bad).strip("\n"), good=textwrap.dedent(good).strip("\n"))
