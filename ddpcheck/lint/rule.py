"""The base class of static rules.

A rule is one module in ddpcheck/lint/rules/, one `Rule` subclass named for what it catches.
Its docstring is its documentation page; `VALID` and `INVALID` examples sit beside the logic and
tests/test_rule_examples.py turns each into a test. Rules are discovered, never registered.

A rule holds a DDP judgement, not analysis: it asks the semantic model of the file
(`self.model`, ddpcheck/lint/model/semantic.py) what the code does — resolved API names, values,
the call graph, what runs on every rank — and reports. Hooks (all optional):
- `finish(self)` after the traversal: most rules do all their work here;
- `on_call(self, call: CallSite)` for every call of the file, in source order, names resolved;
- `visit_<Node>(self, node)` / `leave_<Node>(self, node)` for libcst node types, during the one
  traversal (before names are resolved across modules).
Rules report with `self.report(node, message=None, fix=None, module=None, related=())`: `module`
is the project module the node belongs to when it is not the linted file, `related` the calls
that lead there (see Model.paths.chain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

import libcst as cst

from ddpcheck.describe import Described
from ddpcheck.findings import Applicability

if TYPE_CHECKING:
    from ddpcheck.lint.model.module import CallSite, ModuleModel
    from ddpcheck.lint.model.semantic import Model


@dataclass(frozen=True)
class Invalid:
    """An example the rule must report: `lines` are the 1-based lines of its findings, exactly
    (a line twice for two findings on it); `fixed` is the source after applying the rule's fix,
    for fixable rules."""

    code: str
    lines: tuple[int, ...]
    fixed: str | None = None


@dataclass(frozen=True)
class Replace:
    """A fix: replace `node` by `new` (a libcst node), described for the user."""

    node: cst.CSTNode
    new: cst.CSTNode
    description: str
    applicability: Applicability = Applicability.UNSAFE


@dataclass(frozen=True, eq=False)
class Pending:
    """A finding before it has a position: lines are computed only for nodes that get one."""

    rule: type[Rule]
    module: ModuleModel
    node: cst.CSTNode
    message: str
    fix: Replace | None
    related: tuple[tuple[ModuleModel, cst.CSTNode, str], ...] = ()
    line_in: int = 0  # lines below the node's first line where the finding is (in a long string)


class Rule(Described):
    kind: ClassVar[str] = "lint"
    MESSAGE: ClassVar[str] = ""  # default message: says what is wrong and what to do
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Invalid]] = ()

    def __init__(self, model: Model, reported: list[Pending] | None = None) -> None:
        self.model = model
        # The engine's sink for what this rule reports; the model only answers questions.
        self.reported: list[Pending] = reported if reported is not None else []

    def on_call(self, call: CallSite) -> None:
        """Called for every call in the file, in source order, after names are resolved."""

    def finish(self) -> None:
        """Called once after the traversal."""

    def report(self, node: cst.CSTNode, message: str | None = None, fix: Replace | None = None,
               module: ModuleModel | None = None, related: Sequence[CallSite] = (), line_in: int = 0) -> None:
        """`line_in`: the finding sits that many lines below the start of `node` (a command on
        one line of a long docstring), where a reader looks and a `# noqa` goes."""
        where = module if module is not None else self.model.root
        chain = tuple((c.module, c.node, _via(c)) for c in related)
        self.reported.append(Pending(type(self), where, node, message or self.MESSAGE, fix, chain, line_in))


def _via(call: CallSite) -> str:
    name = call.dotted or "this call"
    return f"called here: `{name}(...)`"
