"""What the engine knows about one file while and after it walks it: the values rules query."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from ddpcheck.lint.names import ImportMap, dotted

if TYPE_CHECKING:
    from ddpcheck.lint.facts import ProjectFacts

DDP = "torch.nn.parallel.DistributedDataParallel"
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
DATALOADER = "torch.utils.data.DataLoader"


@dataclass(eq=False)
class Scope:
    """A module, class or function body. `assignments` maps a name (or `self.x` chain) to every
    value assigned to it in this scope, in source order."""

    name: str
    node: cst.CSTNode
    parent: Scope | None = None
    assignments: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)

    @property
    def qualname(self) -> str:
        if self.parent is None:
            return self.name
        return f"{self.parent.qualname}.{self.name}" if self.parent.parent else self.name

    def lookup(self, name: str) -> list[cst.BaseExpression]:
        """Values assigned to `name` in this scope or the enclosing ones (nearest first)."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.assignments:
                return scope.assignments[name]
            scope = scope.parent
        return []


@dataclass(frozen=True, eq=False)
class Guard:
    """An `if` the current code sits under: `test` is true (negated False) or false (negated True)."""

    test: cst.BaseExpression
    negated: bool
    node: cst.If


@dataclass(frozen=True, eq=False)
class CallSite:
    """One call, with the context it runs in."""

    node: cst.Call
    qualname: str | None  # resolved through imports: torch.distributed.barrier
    dotted: str | None  # as written: dist.barrier, model.module, print
    scope: Scope
    loops: tuple[cst.CSTNode, ...]  # enclosing For/While bodies within the same function
    guards: tuple[Guard, ...]
    withs: tuple[cst.With, ...]

    def arg(self, keyword: str, position: int | None = None) -> cst.BaseExpression | None:
        """The argument passed as `keyword=` or, failing that, at `position`."""
        positional = 0
        for a in self.node.args:
            if a.keyword is not None:
                if a.keyword.value == keyword:
                    return a.value
            elif a.star:
                continue
            else:
                if position is not None and positional == position:
                    return a.value
                positional += 1
        return None

    def has_keyword(self, keyword: str) -> bool:
        return any(a.keyword is not None and a.keyword.value == keyword for a in self.node.args)

    @property
    def has_star_kwargs(self) -> bool:
        return any(a.star == "**" for a in self.node.args)

    @property
    def method(self) -> str | None:
        """`x.set_epoch(...)` → "set_epoch"."""
        func = self.node.func
        return func.attr.value if isinstance(func, cst.Attribute) else None

    @property
    def receiver(self) -> str | None:
        """`loader.sampler.set_epoch(...)` → "loader.sampler"."""
        func = self.node.func
        return dotted(func.value) if isinstance(func, cst.Attribute) else None


@dataclass(frozen=True, eq=False)
class ForSite:
    """One `for` statement, with the loops and guards around it (as for CallSite)."""

    node: cst.For
    scope: Scope
    loops: tuple[cst.CSTNode, ...]
    guards: tuple[Guard, ...]


@dataclass(frozen=True, eq=False)
class Pending:
    """A finding before it has a position: lines are computed only for nodes that get one."""

    rule: type
    node: cst.CSTNode
    message: str
    fix: object | None  # ddpcheck.lint.rule.Replace or None


class FileContext:
    """Everything rules may ask about one file. Filled by one traversal (see engine.py)."""

    def __init__(self, path: str, source: str, module: cst.Module, facts: ProjectFacts | None = None):
        self.path = path
        self.source = source
        self.module = module
        self.names = ImportMap()
        self.calls: list[CallSite] = []
        self.functions: dict[str, cst.FunctionDef] = {}  # qualified name within the file → def
        self.fors: list[ForSite] = []
        self.targets: dict[int, list[str]] = {}  # id(assigned value node) → names it was assigned to
        self.module_scope = Scope("<module>", module)
        self.facts = facts
        self.pending: list[Pending] = []

    # --- queries -----------------------------------------------------------------------------
    def qualname(self, expr: cst.BaseExpression) -> str | None:
        return self.names.resolve(expr)

    def assigned_names(self, value: cst.CSTNode) -> list[str]:
        """The names (`loader`, `self.loader`) that `value` was assigned to, in source order."""
        return self.targets.get(id(value), [])

    def calls_to(self, *qualnames: str) -> Iterator[CallSite]:
        wanted = set(qualnames)
        return (c for c in self.calls if c.qualname in wanted)

    def calls_in(self, function: str) -> Iterator[CallSite]:
        """Calls made directly in the body of the file-level function `function`."""
        return (c for c in self.calls if c.scope.qualname == function)

    def helper_does(self, call: CallSite, fact: str) -> bool:
        """Whether `call` calls a function (of this file or, through imports, of this project)
        known to do `fact` (e.g. "init_process_group", "set_device"). See lint/facts.py."""
        if self.facts is None:
            return False
        return self.facts.call_does(self, call, fact)

    @property
    def uses_ddp(self) -> bool:
        """The file takes part in DDP training: it initialises a process group, wraps a model in
        DDP, imports from torch.distributed, or uses DistributedSampler."""
        cached = getattr(self, "_uses_ddp", None)
        if cached is None:
            cached = (
                self.names.imports_from("torch.distributed")
                or self.names.imports_name(DISTRIBUTED_SAMPLER)
                or any(
                    c.qualname in (INIT_PROCESS_GROUP, DDP, DISTRIBUTED_SAMPLER)
                    or (c.qualname or "").startswith("torch.distributed.")
                    for c in self.calls
                )
                or any(self.helper_does(c, "init_process_group") for c in self.calls)
            )
            self._uses_ddp = cached
        return cached
