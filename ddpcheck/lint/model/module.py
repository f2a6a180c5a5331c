"""One module of the project as the model sees it: scopes and what is bound in them, calls with
the loops, guards and with-blocks around them, functions, classes and their methods, returns,
loop exits (break/continue/return with their loops and guards), the `self` attributes each
function reads.

Filled by one traversal (lint/model/build.py). Values are libcst nodes of this module's tree, or
the small binding markers below where a name is bound by something other than `name = value`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Union

import libcst as cst

from ddpcheck.lint.model.imports import ImportMap
from ddpcheck.lint.model.index import ModuleIndex
from ddpcheck.lint.model.syntax import argument, dotted, has_keyword, has_star_kwargs

UNASKED = object()  # a memo slot not filled yet


@dataclass(frozen=True)
class Target:
    """What a name resolves to (lint/model/resolve.py). `external`: the canonical name of
    something outside the project (`torch.save`). Otherwise `path` is the project module and
    `name` the qualified name inside it ("" for the module itself); `kind` is "function", "class", "module", "value" or "member" (an attribute of a
    function or class: `Trainer.fit`)."""

    external: str | None = None
    path: Path | None = None
    name: str = ""
    kind: str = "external"


@dataclass(eq=False, repr=False)
class Span:
    """The ticks an `except` handler covers: what is bound there, up to `end` (set when the
    walk leaves the handler), runs only when the `try` body raised."""

    end: int = 1 << 62


@dataclass(frozen=True, eq=False, repr=False)
class Point:
    """Where in its scope something happens: the traversal's counter (`tick`), and the loops and
    guards around it (a binding's point also the innermost `except` handler it sits in). Used
    to tell which bindings of a name reach a use."""

    tick: int
    loops: tuple[cst.CSTNode, ...] = ()
    guards: tuple[Guard, ...] = ()
    handler: Span | None = None

    def reaches(self, use: Point) -> bool:
        """A binding made here may be what `use` sees: it comes first, or a loop around both
        brings it round again — unless the two sit in opposite arms of one `if` (and no loop
        around that `if` brings the binding round)."""
        if any(loop in use.loops for loop in self.loops):
            return True
        if self.tick >= use.tick:
            return False
        arms = {(id(g.node), g.negated) for g in use.guards}
        return not any((id(g.node), not g.negated) in arms for g in self.guards)

    def arm_before(self, use: Point) -> tuple[int, bool] | None:
        """When this point sits directly in one arm of an `if`/`else` that always runs before
        `use` (the `if` is under no condition or loop that `use` is not also under, and `use` is
        in neither arm): that `if` and the arm. A binding in each arm hides earlier ones."""
        if not self.guards or self.tick >= use.tick or any(loop not in use.loops for loop in self.loops):
            return None
        *outer, last = self.guards
        if not isinstance(last.node, cst.If) or last.node.orelse is None \
                or not isinstance(last.node.orelse, cst.Else):
            return None
        held = {(id(g.node), g.negated) for g in use.guards}
        if (id(last.node), False) in held or (id(last.node), True) in held:
            return None
        if not all((id(g.node), g.negated) in held for g in outer):
            return None
        return id(last.node), last.negated

    def dominates(self, use: Point) -> bool:
        """A binding made here always happens before `use` and hides earlier ones: it comes
        first, under no condition and in no loop that `use` is not also under."""
        if self.tick >= use.tick:
            return False
        if any(loop not in use.loops for loop in self.loops):
            return False
        if self.handler is not None and use.tick >= self.handler.end:
            # `except ...: config = None` after `try: config = load(f)`: past the handler, the
            # name holds either; the handler runs only when the body raised.
            return False
        arms = {(id(g.node), g.negated) for g in use.guards}
        return all((id(g.node), g.negated) in arms for g in self.guards)


UNKNOWN_POINT = None


@dataclass(frozen=True, eq=False, repr=False)
class Param:
    """A parameter of `function` (its qualified name in the module); `index` counts positional
    parameters from 0 (`self` included), None for keyword-only and `*`/`**` ones."""

    function: str
    name: str
    index: int | None
    default: cst.BaseExpression | None
    star: str = ""
    annotation: cst.BaseExpression | None = None  # `exp: Exp` → the expression `Exp`

    def __repr__(self) -> str:
        return f"<Param {self.function}({self.name})>"


@dataclass(frozen=True, eq=False, repr=False)
class Item:
    """`a, b = value`: the name is element `index` of `value`."""

    value: cst.BaseExpression
    index: int


@dataclass(frozen=True, eq=False, repr=False)
class Element:
    """`for x in iterable`, `with cm as x`: the name is an element of `iterable` (or what `cm` gives)."""

    iterable: cst.BaseExpression
    via_with: bool = False
    # `for _, loader in pairs():`: the name is element `index` of each item (None: the item itself;
    # -1: a place deeper in a nested target or a starred one, not followed).
    index: int | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Augmented:
    """`x += value` (and the other in-place operators): the name's new value depends on the old one."""

    node: cst.AugAssign


@dataclass(frozen=True, eq=False, repr=False)
class Shared:
    """`self.x = value` in a method, as seen from the class: `value` belongs to `scope` (the
    method), where its own names are looked up."""

    value: Union[cst.BaseExpression, Item, Element, Augmented]
    scope: Scope
    point: Point | None = None


Binding = Union[cst.BaseExpression, Param, Item, Element, Augmented, Shared]


@dataclass(eq=False, repr=False)
class Scope:
    """A module, class or function body. `assignments` maps a name (or `self.x` chain) to every
    value bound to it in this scope, in source order; `updates` maps a dict's name to the entries
    added later (`kw.update({...})`, `kw.update(k=v)`, `kw["k"] = v`) as (key or None, value,
    the guards around it, where it happens)."""

    name: str
    node: cst.CSTNode
    parent: Scope | None = None
    kind: str = "module"  # "module", "class" or "function"
    assignments: dict[str, list[Binding]] = field(default_factory=dict)
    points: dict[str, list[Point | None]] = field(default_factory=dict)  # parallel to assignments
    updates: dict[str, list[tuple[str | None, cst.BaseExpression, tuple[Guard, ...], Point]]] = field(
        default_factory=dict)
    _qualname: str | None = None

    @property
    def qualname(self) -> str:
        found = self._qualname
        if found is None:
            if self.parent is None:
                found = self.name
            else:
                found = f"{self.parent.qualname}.{self.name}" if self.parent.parent else self.name
            self._qualname = found
        return found

    def __repr__(self) -> str:
        return f"<Scope {self.kind} {self.qualname}>"

    def lookup(self, name: str) -> list[Binding]:
        """Values bound to `name` in this scope or the enclosing ones (nearest first); class
        bodies are skipped from inside their methods, as in Python."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.assignments and (scope is self or scope.kind != "class" or name.startswith("self.")):
                return scope.assignments[name]
            scope = scope.parent
        return []

    def owner_of(self, name: str) -> Scope | None:
        """The scope whose bindings `lookup(name)` returns."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.assignments and (scope is self or scope.kind != "class" or name.startswith("self.")):
                return scope
            scope = scope.parent
        return None

    def reaching(self, name: str, use: Point) -> list[Binding]:
        """The bindings of `name` in this scope that may reach `use` (a point in this scope):
        the latest one that always happens before it, and the conditional ones after that."""
        values = self.assignments.get(name, [])
        points = self.points.get(name, [])
        if len(points) != len(values):
            return values
        found: list[tuple[Binding, Point | None]] = []
        dominating: Point | None = None
        arms: dict[int, set[bool]] = {}
        for value, point in sorted(zip(values, points), key=lambda vp: vp[1].tick if vp[1] else -1, reverse=True):
            if point is None:
                found.append((value, point))
                continue
            if not point.reaches(use):
                continue
            found.append((value, point))
            if point.dominates(use) or self._dominates_on_same_tests(point, use):
                dominating = point
                break
            arm = point.arm_before(use)
            if arm is not None:
                sides = arms.setdefault(arm[0], set())
                sides.add(arm[1])
                if len(sides) == 2:
                    break  # bound in both arms of an `if`/`else` that runs before the use
        if dominating is not None:
            # A binding made after `use` comes round only through the loops around both; one that
            # always happens before `use` inside each of those loops (`model = build(name)` at the
            # top of `for name in tasks:`) rebinds the name first on every iteration.
            found = [(v, p) for v, p in found
                     if p is None or p.tick < use.tick
                     or not all(loop in dominating.loops for loop in p.loops if loop in use.loops)]
        found.reverse()
        return [v for v, _ in found]

    def _dominates_on_same_tests(self, point: Point, use: Point) -> bool:
        """`if args.compile: model = torch.compile(model)`, later `if args.compile: raw =
        model._orig_mod`: the binding happens on every path that passes the second test, since
        both ask the same question and nothing in this scope rebinds what the test reads between
        them. Each guard of the binding that `use` does not share must have such a twin around
        `use` (the same test, the same arm); tests that call anything are not compared."""
        if point.tick >= use.tick or any(loop not in use.loops for loop in point.loops):
            return False
        held = {(id(g.node), g.negated) for g in use.guards}
        unshared = [g for g in point.guards if (id(g.node), g.negated) not in held]
        if not unshared:
            return False
        for guard in unshared:
            names = _stable_test_names(guard.test)
            if names is None or not any(
                    g.negated == guard.negated and g.node is not guard.node and g.test.deep_equals(guard.test)
                    for g in use.guards):
                return False
            for name, bound in self.assignments.items():
                if not any(name == n or n.startswith(name + ".") for n in names):
                    continue
                ticks = [p.tick for p in self.points.get(name, []) if p is not None]
                if len(ticks) != len(bound) or any(point.tick < t < use.tick for t in ticks):
                    return False
        return True

    def binds(self, name: str) -> bool:
        """Whether `name` is bound (assigned, or a parameter) here or in a scope around this one."""
        return bool(self.lookup(name)) or any(
            name in s.assignments for s in self.chain()
        )

    def chain(self) -> Iterator[Scope]:
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    @property
    def function(self) -> Scope | None:
        """The innermost function scope this scope is (or is in)."""
        for scope in self.chain():
            if scope.kind == "function":
                return scope
        return None

    @property
    def class_scope(self) -> Scope | None:
        """The class whose method this scope is (for `self`)."""
        function = self.function
        if function is not None and function.parent is not None and function.parent.kind == "class":
            return function.parent
        return None


@dataclass(frozen=True, eq=False, repr=False)
class Guard:
    """An `if` (or `a if c else b`) the code sits under: `test` is true (negated False) or
    false (negated True). `node` is the If/IfExp; an early exit (`if rank != 0: return`) guards
    the rest of its block with negated=True."""

    test: cst.BaseExpression
    negated: bool
    node: cst.CSTNode


@dataclass(eq=False)
class CallSite:
    """One call, with the context it runs in. `qualname` is the callee's resolved name: the
    canonical API name for outside libraries (`torch.distributed.barrier`, followed through the
    project's re-exports and star imports), the dotted origin for project names, or None."""

    node: cst.Call
    qualname: str | None
    dotted: str | None  # as written: dist.barrier, model.module, print
    scope: Scope
    loops: tuple[cst.CSTNode, ...]  # enclosing For/While bodies within the same function
    guards: tuple[Guard, ...]
    withs: tuple[cst.With, ...]
    module: ModuleModel
    index: int  # position in module.calls (source order)
    tick: int = 0  # the traversal's counter when the call was met (see Point)
    target: Target | None = None  # what a project name resolved to (see resolve.py)
    method: str | None = None  # `x.set_epoch(...)` → "set_epoch"
    api_memo: object = UNASKED  # Model.api's answer, once asked

    @property
    def point(self) -> Point:
        return Point(self.tick, self.loops, self.guards)

    def __repr__(self) -> str:
        return f"<CallSite {self.dotted or '?'} #{self.index} in {self.scope.qualname} of {self.module.path}>"

    def arg(self, keyword: str, position: int | None = None) -> cst.BaseExpression | None:
        """The argument passed as `keyword=` or, failing that, at `position`."""
        return argument(self.node, keyword, position)

    def has_keyword(self, keyword: str) -> bool:
        return has_keyword(self.node, keyword)

    @property
    def has_star_kwargs(self) -> bool:
        return has_star_kwargs(self.node)

    @property
    def receiver(self) -> cst.BaseExpression | None:
        func = self.node.func
        return func.value if isinstance(func, cst.Attribute) else None

    @property
    def receiver_name(self) -> str | None:
        """`loader.sampler.set_epoch(...)` → "loader.sampler"."""
        func = self.node.func
        return dotted(func.value) if isinstance(func, cst.Attribute) else None


@dataclass(frozen=True, eq=False, repr=False)
class _LoopStatement:
    """A loop statement, with the loops and guards around it (as for CallSite)."""

    node: cst.CSTNode
    scope: Scope
    loops: tuple[cst.CSTNode, ...]
    guards: tuple[Guard, ...]
    tick: int = 0
    withs: tuple[cst.With, ...] = ()

    @property
    def point(self) -> Point:
        return Point(self.tick, self.loops, self.guards)


@dataclass(frozen=True, eq=False, repr=False)
class ForSite(_LoopStatement):
    """One `for` statement."""

    node: cst.For


@dataclass(frozen=True, eq=False, repr=False)
class WhileSite(_LoopStatement):
    """One `while` statement."""

    node: cst.While


@dataclass(frozen=True, eq=False, repr=False)
class ExitSite:
    """A `break`, `continue` or `return` statement, with the loops and guards around it (as for
    CallSite): which loop it leaves, and under which tests."""

    node: cst.Break | cst.Continue | cst.Return
    scope: Scope
    loops: tuple[cst.CSTNode, ...]
    guards: tuple[Guard, ...]


@dataclass(frozen=True, eq=False, repr=False)
class EnvAccess:
    """`os.environ["KEY"]` (`written`: as an assignment target) in `scope`, under `guards`."""

    key: str
    node: cst.Subscript
    scope: Scope
    guards: tuple[Guard, ...]
    written: bool


@dataclass(eq=False, repr=False)
class ClassInfo:
    """A class of the module: its bases as written, its methods (name → qualified function name),
    which of them are properties, and its body scope (holding `self.x` attributes)."""

    qualname: str
    node: cst.ClassDef
    bases: tuple[cst.BaseExpression, ...]
    scope: Scope
    methods: dict[str, str] = field(default_factory=dict)
    properties: set[str] = field(default_factory=set)


class ModuleModel:
    """Everything the model knows about one module after its single traversal."""

    def __init__(self, path: str, source: str, tree: cst.Module) -> None:
        self.path = path
        self.source = source
        self.tree = tree
        self._code: dict[int, tuple[cst.CSTNode, str]] = {}  # id(node) → the node and its text (see code)
        self.names = ImportMap()
        self.calls: list[CallSite] = []
        self.functions: dict[str, cst.FunctionDef] = {}  # qualified name within the module → def
        self.function_scopes: dict[str, Scope] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.returns: dict[str, list[cst.BaseExpression]] = {}  # function → returned values
        self.generators: set[str] = set()  # functions with a `yield` of their own
        self.yields: dict[str, list[cst.BaseExpression]] = {}  # generator → the values it yields
        self.return_points: dict[int, Point] = {}  # id(returned value) → where it is returned
        self.if_ticks: dict[int, int] = {}  # id(If) → the traversal's counter where the `if` is met
        self.fors: list[ForSite] = []
        self.whiles: list[WhileSite] = []  # `while` statements
        self.exits: list[ExitSite] = []  # every break, continue and return, in source order
        # function → `self.x` attributes its body reads (not assignment targets), by name
        self.self_reads: dict[str, dict[str, list[cst.Attribute]]] = {}
        self.targets: dict[int, list[str]] = {}  # id(assigned value) → names it was assigned to
        self.module_scope = Scope("<module>", tree)
        self.main_guards: list[cst.If] = []  # `if __name__ == "__main__":` blocks
        self.ifs: list[tuple[cst.If, Scope]] = []  # every `if` statement and the scope it is in
        self.env: list[EnvAccess] = []  # `os.environ["KEY"]` reads and writes
        self.withs: list[cst.With] = []  # every with statement
        self.decorators: dict[str, tuple[cst.BaseExpression, ...]] = {}  # function → decorator expressions
        self.memo: dict[str, Any] = {}  # per-module answers of the model's queries, by query name
        self._call_at: dict[int, CallSite] | None = None
        self._by_scope: dict[str, list[CallSite]] | None = None

    def own_index(self) -> ModuleIndex:
        """This module's exports, from its model (the same shape lint/model/index.py reads from text)."""
        found: ModuleIndex | None = self.memo.get("own_index")  # the traversal has filled what it reads
        if found is None:
            found = self.memo["own_index"] = self._own_index()
        return found

    def _own_index(self) -> ModuleIndex:
        scope = self.module_scope
        functions = frozenset(q for q in self.functions if "." not in q)
        classes = {q: tuple(dotted(b) or "" for b in c.bases) for q, c in self.classes.items() if "." not in q}
        assigned = frozenset(n for n in scope.assignments if "." not in n) - functions - set(classes)
        aliases = {k: v for k, v in self.names.aliases.items() if k not in functions and k not in classes}
        return ModuleIndex(aliases, tuple(self.names.stars), functions, classes, assigned)

    def call_at(self, node: cst.Call) -> CallSite | None:
        """The CallSite recorded for a call node of this module."""
        if self._call_at is None:
            self._call_at = {id(c.node): c for c in self.calls}
        return self._call_at.get(id(node))

    def calls_in(self, function: str) -> list[CallSite]:
        """Calls made directly in the body of `function` (a qualified name within the module;
        "<module>" for module-level code)."""
        if self._by_scope is None:
            by_scope: dict[str, list[CallSite]] = {}
            for call in self.calls:
                by_scope.setdefault(call.scope.qualname, []).append(call)
            self._by_scope = by_scope
        return self._by_scope.get(function, [])

    def assigned_names(self, value: cst.CSTNode) -> list[str]:
        """The names (`loader`, `self.loader`) that `value` was assigned to, in source order."""
        return self.targets.get(id(value), [])

    def code(self, node: cst.CSTNode) -> str:
        """The node's text. Kept: rules ask for the same function's or class's text again and
        again, and libcst regenerates it from the tree each time. The node is kept with its
        text: a node made for one question and dropped would free its id for the next one."""
        kept = self._code.get(id(node))
        if kept is not None and kept[0] is node:
            return kept[1]
        text = self.tree.code_for_node(node)
        self._code[id(node)] = (node, text)
        return text

    def __repr__(self) -> str:
        return f"<ModuleModel {self.path}>"


def same_test(a: Guard, b: Guard) -> bool:
    """The same arm of the same question: one `if`, or two whose tests are equal and built only
    from names, attributes, literals and comparisons (`if self.distributed:` in two methods of
    one class). Whether what the tests read is rebound in between is the caller's to ask."""
    if a.negated != b.negated:
        return False
    if a.node is b.node:
        return True
    return _stable_test_names(a.test) is not None and a.test.deep_equals(b.test)


def _stable_test_names(test: cst.BaseExpression) -> set[str] | None:
    """The names and attribute chains a test reads when it is built only from them, literals,
    comparisons and `and`/`or`/`not` (a test that asks the same each time it is evaluated while
    they keep their values); None for any other test."""
    names: set[str] = set()

    def walk(node: cst.BaseExpression) -> bool:
        if isinstance(node, (cst.Name, cst.Attribute)):
            text = dotted(node)
            if text is None:
                return False
            names.add(text)
            return True
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
            return True
        if isinstance(node, cst.UnaryOperation):
            return walk(node.expression)
        if isinstance(node, cst.BooleanOperation):
            return walk(node.left) and walk(node.right)
        if isinstance(node, cst.Comparison):
            return walk(node.left) and all(walk(c.comparator) for c in node.comparisons)
        return False

    return names if walk(test) else None



LoopSite = ForSite | WhileSite  # a `for` or a `while`, where a rule reads both alike
