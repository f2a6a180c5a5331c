"""Bounded value flow: what an expression may hold, followed through assignments, tuple
unpacking, both arms of `a if c else b`, dict entries and `**kwargs`, parameters (to the
arguments of the call being followed, or of every known call site), returns (into call results),
`self.x` attributes set in other methods, properties, `.module` of a DDP wrapper and `.sampler` of
a DataLoader.

The answer is a list of leaves: expressions that are not followed further (a call of an API or
a project class, a literal, a parameter nobody passes, an unknown attribute). A bound hit (depth,
number of leaves, work per file) leaves the expression itself as a leaf — unknown, never a
wrong answer.

Paths: a leaf carries the conditions it is chosen under (the guards of the point it is reached
at, the arms of `a if c else b` and of `a and b` / `a or b` on the way), so leaves of two
arguments can be paired (`compatible`: never from opposite arms of one `if`; `along`: the
bindings of the arms a leaf was chosen in hide earlier ones), and a call's arguments are read
once per caller (`frames`). Arms and guarded bindings whose test the values decide are dropped
(`outcome`: `if save:` with `save=False` by default, `mode == "eval"`, `model is not None`).
Dicts are followed through literals, `dict(...)`, merges (`{**a, **b}`, `dict(a, **b)`, `a | b`)
and later `update`s (`keyword`, `mapping_keys`), and through the entries written in the arms
of an `if` (`models["gen"] = DDP(...)` / `else: models["gen"] = ...`), also where an empty dict
filled that way is handed to a function that reads it; `same_value` tells two bindings that give the
same value apart from ones that do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, Union

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve, is_distributed_test, is_wrapped_test
from ddpcheck.lint.model.module import (
    Augmented, Binding, CallSite, ClassInfo, Element, Guard, Item, ModuleModel, Param, Point, Scope, Shared,
)
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.options import constant_flag, default_rules_out
from ddpcheck.lint.model.resolve import Resolver
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import argument, children, dotted, int_value, is_none, last_name, subexpressions


class _Graph(Protocol):
    """The call graph (graph.py) as the value flow asks it."""

    def targets(self, site: CallSite) -> list[tuple[Function, str]]: ...
    def callers(self, function: Function) -> list[tuple[CallSite, str]]: ...
    def argument_for(self, call: CallSite, function: Function, param: Param, bound: str
                     ) -> cst.BaseExpression | CallSite | None: ...
    def attribute_writes(self, module: ModuleModel, node: cst.Attribute, scope: Scope, frame: Frame | None,
                         at: Point | None, depth: int = 2
                         ) -> list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]]: ...
    def base_argument(self, site: CallSite, api_class: str, keyword: str, position: int | None,
                      frame: Frame | None = None) -> list[Value] | None: ...
    def instance_of(self, value: Value) -> tuple[ModuleModel, ClassInfo] | None: ...
    def mro(self, module: ModuleModel, info: ClassInfo) -> list[tuple[ModuleModel, ClassInfo]]: ...
    def method(self, module: ModuleModel, info: ClassInfo, name: str, after: ClassInfo | None = None
               ) -> Function | None: ...
    def built_subclasses(self, module: ModuleModel, info: ClassInfo) -> list[tuple[ModuleModel, ClassInfo]]: ...
    def instances_of(self, value: Value) -> list[tuple[ModuleModel, ClassInfo]]: ...
    def member_values(self, instance: tuple[ModuleModel, ClassInfo], made: Value, attr: str, depth: int
                      ) -> list[Value]: ...
    def class_read(self, named: Value, attr: str) -> list[Value]: ...
    def passing(self, module: ModuleModel, scope: Scope) -> dict[str, list[CallSite]]: ...
    def import_closure(self, module: ModuleModel) -> list[str]: ...


class _Paths(Protocol):
    """The execution paths (paths.py) as the value flow asks them."""

    def kind(self, module: ModuleModel, guard: Guard, scope: Scope | None = None) -> str | None: ...
    def dead(self, site: CallSite) -> bool: ...


class ValuesModel(Protocol):
    """What the value flow asks of the semantic model (semantic.Model). The call graph and the
    execution paths sit above this module and read values themselves, so they are reached
    through the model and typed by what is asked of them, not imported."""

    @property
    def graph(self) -> _Graph: ...
    @property
    def paths(self) -> _Paths: ...
    @property
    def resolver(self) -> Resolver: ...
    def project_model(self, path: Path) -> ModuleModel | None: ...
    def resolver_for(self, module: ModuleModel, scope: Scope | None = None) -> Resolve: ...
    def api(self, site: CallSite) -> str | None: ...
    def api_of(self, value: Value) -> str | None: ...
    def qualname(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope | None = None) -> str | None: ...


DEPTH = 16
MAX_LEAVES = 48
MAX_CALLERS = 8
# Methods that return their receiver (a module moved or cast, a module set to train/eval mode).
_PASSTHROUGH = frozenset({
    "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval",
    "requires_grad_", "share_memory", "to_empty",
})
# Outside calls that hand back the objects they are given, patched in place: apex's
# `model, optimizer = amp.initialize(model, optimizer, opt_level=...)` (the model alone when no
# optimizer is passed). Their value is the argument, element by element.
_RETURNS_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "apex.amp.initialize": ("models", "optimizers"),
}
_RETURNING_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in _RETURNS_ARGUMENTS)


# Attributes torch's constructors keep from their arguments: (class, position of the argument).
_BASE_ATTRIBUTES = {
    "sampler": ((api.DATALOADER, 3), (api.BATCH_SAMPLER, 0)),
    "batch_sampler": ((api.DATALOADER, 4),),
    "dataset": ((api.DATALOADER, 0),),
    "module": ((api.DDP, 0),),
}


@dataclass(frozen=True, eq=False)
class Unknown:
    """A leaf the evaluation stopped at (a cycle): nothing is known about it."""

    node: Leaf


# What a Value holds: an expression or binding marker, or where the evaluation stopped.
Leaf = Union[Binding, Unknown]


@dataclass(frozen=True, eq=False, repr=False)
class Frame:
    """A call being followed into `function`: its parameters are that call's arguments.
    `bound`: how the call binds it (graph.Callee): "" plain, "method"/"instance"/"constructor" (the
    first parameter is the receiver), "spawn"/"process" (a worker started with `args=`)."""

    function: Function
    call: CallSite
    caller: Frame | None
    bound: str


@dataclass(frozen=True, eq=False, repr=False)
class Value:
    """A leaf: `node` (an expression of `module`, or a binding marker) as reached in `scope` and
    `frame`."""

    module: ModuleModel
    node: Leaf
    scope: Scope
    frame: Frame | None
    at: Point | None = None  # where in `scope` the leaf is reached (see Point)
    arms: tuple[Guard, ...] = ()  # the arms of `a if c else b` the leaf was chosen through

    @property
    def conditions(self) -> tuple[Guard, ...]:
        """The tests that hold where the leaf is chosen: the guards of the point it is reached at
        and the arms of conditional expressions on the way."""
        return (self.at.guards if self.at is not None else ()) + self.arms

    @property
    def call(self) -> cst.Call | None:
        return self.node if isinstance(self.node, cst.Call) else None

    def __repr__(self) -> str:
        node = self.node
        text = self.module.code(node) if isinstance(node, cst.CSTNode) else repr(node)
        return f"<Value {' '.join(text.split())[:60]!r} in {self.scope.qualname}>"


def off_default_branch(value: Value) -> bool:
    """The leaf is chosen on a branch the command line's defaults do not take (`if args.model ==
    "PatchTST":`, or `if "CNN" in model_name:` after `model_name = args.model_name`, with
    `--model_name` defaulting to "FNO"): the network a default run builds is another."""
    at = value.at.guards if value.at is not None else ()
    return any(default_rules_out(value.module, g.test, g.negated, value.scope) for g in at) \
        or any(default_rules_out(value.module, g.test, g.negated) for g in value.arms)


def in_caller_terms(guards: Sequence[Guard], frame: Frame) -> tuple[Guard, ...] | None:
    """`guards` of code in `frame.function` written in the terms of the call's own function: each
    parameter a test names is replaced by the argument the call passes it (`def build(opt): if not
    opt.fp16: ...` called as `build(args)` reads `if not args.fp16:`). None where a named parameter
    is rebound in the function, not passed (its default is not the caller's value), or passed by
    `*args`/`**kwargs`: those tests are not the caller's to compare."""
    bindings = frame.function.scope.assignments
    shift = 0 if frame.bound == "" else 1
    passed: dict[str, cst.BaseExpression] = {}
    for guard in guards:
        for node in subexpressions(guard.test):
            if not isinstance(node, cst.Name) or node.value in passed:
                continue
            bound = bindings.get(node.value, [])
            param = next((b for b in bound if isinstance(b, Param)), None)
            if param is None:
                continue
            if len(bound) != 1 or param.star:
                return None
            position = param.index - shift if param.index is not None else None
            if position is not None and position < 0:
                return None  # the receiver of a method: not an argument of the call
            argument_passed = frame.call.arg(param.name, position)
            if argument_passed is None:
                return None
            passed[node.value] = argument_passed
    if not passed:
        return tuple(guards)
    rename = _Substitute(passed)
    return tuple(Guard(test=guard.test.visit(rename), negated=guard.negated, node=guard.node)  # type: ignore[arg-type]
                 for guard in guards)


class _Substitute(cst.CSTTransformer):
    """Replaces names by expressions, not the attribute names (`opt.fp16`'s `fp16`) nor keywords."""

    def __init__(self, passed: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.passed = passed

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.passed.get(original_node.value, updated_node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)


# The step a node's type takes (see Values._step), found once per type: isinstance against
# libcst's node classes goes through ABCMeta, and the evaluator asks it for every step.
_SHARED, _PARAM, _ITEM, _ELEMENT, _LEAF, _IFEXP, _BOOLEAN, _NAME, _CALL, _SUBSCRIPT = range(10)
_BRANCH: dict[type, int] = {}


def _conjunction(test: cst.BaseExpression) -> bool:
    """`a and b` (in parentheses or not): a test whose negation is a disjunction."""
    return isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)


def _bypassed(point: Point | None, bindings: Sequence[tuple[Binding, Point | None]], at: Point | None) -> list[Guard]:
    """The `if`s without `else` that rebind the name between `point` and the use `at` (`if
    isinstance(model, DDP): model = model.module` after `def run(model):`): the binding at `point`
    reaches `at` only where each of their tests is false, as the negated guards returned."""
    if point is None or at is None:
        return []
    held = {id(g.node) for g in at.guards}
    passed: list[Guard] = []
    for _, later in bindings:
        # (The `if` may sit outside a loop the use is in: `if isinstance(model, DDP): model =
        # model.module`, then `for x, y in loader: model(x)` in an evaluation helper.)
        if later is None or not later.guards or not point.tick < later.tick < at.tick \
                or tuple(at.loops[:len(later.loops)]) != tuple(later.loops):
            continue
        *outer, last = later.guards
        if not isinstance(last.node, cst.If) or last.node.orelse is not None or last.negated \
                or id(last.node) in held or any(id(g.node) not in held for g in outer):
            continue
        passed.append(Guard(last.test, True, last.node))
    return passed


def _branch(node: object) -> int:
    if isinstance(node, Shared):
        branch = _SHARED
    elif isinstance(node, Param):
        branch = _PARAM
    elif isinstance(node, Item):
        branch = _ITEM
    elif isinstance(node, Element):
        branch = _ELEMENT
    elif isinstance(node, Augmented):
        branch = _LEAF
    elif isinstance(node, cst.IfExp):
        branch = _IFEXP
    elif isinstance(node, cst.BooleanOperation):
        branch = _BOOLEAN
    elif isinstance(node, (cst.Name, cst.Attribute)):
        branch = _NAME
    elif isinstance(node, cst.Call):
        branch = _CALL
    elif isinstance(node, cst.Subscript):
        branch = _SUBSCRIPT
    else:
        branch = _LEAF
    _BRANCH[type(node)] = branch
    return branch


# Evaluation steps one rule may spend on a linted file; past them, what it asks is unknown.
STEPS_PER_RULE = 20000


def definition_truth(module: ModuleModel, scope: Scope, test: cst.BaseExpression) -> bool | None:
    """What a test made of names bound only by `def`/`class` (always true: a function object),
    `not`, `and` and `or` comes to; None when any other operand decides it. Read without
    evaluating values, so that it can be asked while facts are being gathered."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = definition_truth(module, scope, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left = definition_truth(module, scope, test.left)
        right = definition_truth(module, scope, test.right)
        if isinstance(test.operator, cst.And):
            return False if False in (left, right) else (True if left and right else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if isinstance(test, cst.Name) and _names_a_definition(module, scope, test.value):
        return True
    return None


def _names_a_definition(module: ModuleModel, scope: Scope, name: str) -> bool:
    """`name` is bound only by a `def` or `class` statement where it is read (no assignment,
    parameter or other binding of it in the scope that owns it, and not imported there)."""
    owner = scope.owner_of(name)
    if owner is None or owner.assignments.get(name) != [] or owner.kind == "class":
        return False
    qualname = f"{owner.qualname}.{name}" if owner.parent is not None else name
    if qualname not in module.functions and qualname not in module.classes:
        return False
    return name not in module.names.aliases


def _module_switch(module: ModuleModel, test: cst.BaseExpression) -> bool | None:
    """`use_compile` (or `not use_compile`) of a module-level `use_compile = False` that nothing
    binds again (no other assignment, no `global` statement, no `exec`/`globals()` that may
    rewrite it, as nanoGPT's configurator does): the switch the file ships with. None otherwise."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _module_switch(module, test.expression)
        return None if inner is None else not inner
    if not isinstance(test, cst.Name):
        return None
    switches = module.memo.get("module_switches")
    if switches is None:
        switches = module.memo["module_switches"] = _module_switches(module)
    return switches.get(test.value)


def _module_switches(module: ModuleModel) -> dict[str, bool]:
    """The module-level names `_module_switch` reads as fixed, with their values."""
    if re.search(r"\bexec\s*\(|\bglobals\s*\(\s*\)|^[ \t]*global[ \t]", code_only(module.source), re.M):
        return {}
    local = {name for s in module.function_scopes.values() for name in s.assignments}
    out: dict[str, bool] = {}
    for name, bound in module.module_scope.assignments.items():
        if len(bound) == 1 and isinstance(bound[0], cst.Name) and bound[0].value in ("True", "False") \
                and name not in local:
            out[name] = bound[0].value == "True"
    return out


# Asked for the same attribute names of the same texts for every linted file that reaches them.
@lru_cache(maxsize=4096)
def _only_read(name: str, text: str) -> bool:
    """`text` names the attribute `name` only in `getattr`/`hasattr` reads and in reads of it
    as an attribute (see Values._never_set)."""
    if name not in text:
        return True
    word = re.compile(rf"\b{re.escape(name)}\b")
    read = re.compile(rf"\b(?:get|has)attr\([^(),]*,\s*[\"']{re.escape(name)}[\"']")
    # `x.name` read (not assigned, not augmented): it makes no attribute.
    attribute = re.compile(rf"(?<=[\w\])]\.){re.escape(name)}\b(?!\s*(?:[-+*/%&|^@]|<<|>>|//|\*\*)?=(?!=))")
    return len(word.findall(text)) == len(read.findall(text)) + len(attribute.findall(text))


class Values:
    def __init__(self, model: ValuesModel) -> None:
        self.model = model
        self.budget = STEPS_PER_RULE
        self.period = 0  # counts the budgets given: answers cut short are kept only within one
        self._parting = False
        self._inherited_memo: dict[tuple[int, str], list[tuple[ModuleModel, Scope]]] = {}
        self._left_memo: dict[tuple[int, str], set[int]] = {}  # (method scope, attribute) → bindings it leaves
        self._expanding: set[tuple[int, str]] = set()  # dicts whose later entries are being read
        self._unpacking: set[tuple[int, str]] = set()  # (call, keyword) of `**kwargs` entries being read
        self._testing = 0  # nested `outcome` evaluations (a test read while reading a test)
        self._outcomes: dict[tuple[int, int], bool | None] = {}

    def fresh_budget(self) -> None:
        """Give the next rule the whole budget: what one rule finds must not depend on which
        rules ran before it and how much they spent."""
        self.budget = STEPS_PER_RULE
        self.period += 1

    @property
    def whole(self) -> bool:
        """No evaluation since the budget was renewed has been cut short by it. Only an answer
        worked out while this holds may be kept for later askers: one cut short would hand the
        next rule, with its fresh budget, what the previous rule could afford, so that what a rule
        reports would depend on which rules ran before it."""
        return self.budget > 0

    def of(self, module: ModuleModel, expr: Binding, scope: Scope, frame: Frame | None = None,
           depth: int = DEPTH, at: Point | None = None) -> list[Value]:
        """The leaves `expr` (in `module`, `scope`, `frame`, evaluated at point `at` of its scope,
        when known) may evaluate to."""
        out: list[Value] = []
        seen: set[tuple[int, int]] = set()
        for value in self._eval(module, expr, scope, frame, depth, seen, at):
            out.append(value)
            if len(out) >= MAX_LEAVES:
                break
        if at is not None and at.guards and not self._parting:
            self._parting = True  # (what a wrapper is asks for values again: not from in here)
            try:
                out = self._apart(module, out, at)
            finally:
                self._parting = False
        return out

    def _apart(self, module: ModuleModel, values: list[Value], at: Point) -> list[Value]:
        """Drop the DDP wrappers made under an `if` whose other arm `at` is in: the same test,
        written the same way in the same module and reading no call (`if WITH_DDP and SIZE > 1:
        self.model = DDP(self.model)` in the trainer, then `trainer.model.state_dict()` under the
        `else:` of `if WITH_DDP and SIZE > 1:` in `main`: the plain model)."""
        made: list[tuple[Value, CallSite]] = []
        for value in values:
            site = module.call_at(value.call) if value.module is module and value.call is not None else None
            if site is not None and site.guards:
                made.append((value, site))
        if not made:
            return values
        taken = {(_test_text(module, g.test), g.negated) for g in at.guards if _plain_test(g.test)}
        if not taken:
            return values
        dropped = {id(value) for value, site in made
                   if any((_test_text(module, g.test), not g.negated) in taken
                          for g in site.guards if _plain_test(g.test))
                   and self.model.api_of(value) in (api.DDP, api.DATA_PARALLEL)}
        return [value for value in values if id(value) not in dropped] if dropped else values

    # --- the evaluator -----------------------------------------------------------------------
    def _eval(self, module: ModuleModel, node: Leaf, scope: Scope, frame: Frame | None, depth: int,
              seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        """`seen` holds what is being evaluated on the way here: met again, it is a cycle."""
        key = (id(node), id(frame))
        if key in seen:
            yield Value(module, Unknown(node), scope, frame, at)  # a cycle: unknown from here
            return
        seen.add(key)
        try:
            yield from self._step(module, node, scope, frame, depth, seen, at)
        finally:
            seen.discard(key)

    def _step(self, module: ModuleModel, node: Leaf, scope: Scope, frame: Frame | None, depth: int,
              seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        self.budget -= 1
        if depth <= 0 or self.budget <= 0:
            yield Value(module, node, scope, frame, at)
            return
        branch = _BRANCH.get(type(node))
        if branch is None:
            branch = _branch(node)
        if branch == _NAME:
            yield from self._name(module, node, scope, frame, depth, seen, at)  # type: ignore[arg-type]
        elif branch == _CALL:
            yield from self._call(module, node, scope, frame, depth, seen, at)  # type: ignore[arg-type]
        elif branch == _LEAF:
            yield Value(module, node, scope, frame, at)
        elif branch == _SHARED:
            assert isinstance(node, Shared)
            yield from self._eval(module, node.value, node.scope, self._frame_for(node.scope, frame), depth - 1, seen,
                                  node.point)
        elif branch == _PARAM:
            assert isinstance(node, Param)
            yield from self._param(module, node, scope, frame, depth, seen, at)
        elif branch == _ITEM:
            assert isinstance(node, Item)
            for whole in self._eval(module, node.value, scope, frame, depth - 1, seen, at):
                yield from self._item(whole, node.index, depth - 1, seen)
        elif branch == _ELEMENT:
            assert isinstance(node, Element)
            if node.via_with:
                # `with io.BytesIO() as f:`: what the context manager gives, taken to be itself.
                yield from self._eval(module, node.iterable, scope, frame, depth - 1, seen, at)
            else:
                yielded = self._yielded(module, node, scope, frame, depth, seen, at)
                if yielded is None:
                    yielded = self._listed(module, node, scope, frame, depth, seen, at)
                if yielded is not None:
                    yield from yielded
                else:
                    yield Value(module, node, scope, frame, at)
        elif branch == _IFEXP:
            assert isinstance(node, cst.IfExp)
            fixed = self.outcome(module, node.test, scope, frame, at)
            if fixed is None and _none_test_of_a_local(node.test):
                # `True if sampler is None else False`: a local name every binding of which is
                # None, or every one an object a constructor makes, decides its arm.
                fixed = self.outcome(module, node.test, scope, frame, at, parameters_only=False)
            if fixed is not False:
                yield from self._arm(module, node, node.body, False, scope, frame, depth, seen, at)
            if fixed is not True:
                yield from self._arm(module, node, node.orelse, True, scope, frame, depth, seen, at)
        elif branch == _BOOLEAN:
            assert isinstance(node, cst.BooleanOperation)
            # `a or b` is b only where a is false, `a and b` only where a is true: b's leaves are
            # chosen under that condition, as an arm of `b if a else ...` would be.
            # A left leaf known to be false (`loss_fn or self.model.loss` with `loss_fn=None` left at
            # its default) is never the value of `or`; one known to be true never that of `and`.
            either = isinstance(node.operator, cst.Or)
            for value in self._eval(module, node.left, scope, frame, depth - 1, seen, at):
                truth = _truth(value.node)
                if truth is None or truth == either:
                    yield value
            condition = Guard(node.left, either, node)
            for value in self._eval(module, node.right, scope, frame, depth - 1, seen, at):
                yield Value(value.module, value.node, value.scope, value.frame, value.at, value.arms + (condition,))
        else:
            yield from self._subscript(module, node, scope, frame, depth, seen, at)  # type: ignore[arg-type]

    def _arm(self, module: ModuleModel, node: cst.IfExp, arm: cst.BaseExpression, negated: bool, scope: Scope,
             frame: Frame | None, depth: int, seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        """One arm of `a if test else b` (see _unwrapped)."""
        guard = Guard(node.test, negated, node)
        for value in self._unwrapped(self._eval(module, arm, scope, frame, depth - 1, seen, at), module, [guard]):
            yield Value(value.module, value.node, value.scope, value.frame, value.at, value.arms + (guard,))

    def _never(self, module: ModuleModel, guard: Guard, scope: Scope, frame: Frame | None) -> bool:
        """A guard that never holds: a flag the command line cannot change, or a test of a
        parameter that the call being followed (or every known caller and the default) makes
        false, on its other arm."""
        fixed = self.outcome(module, guard.test, scope, frame)
        return fixed is not None and fixed == guard.negated

    def _unwrapped(self, values: Iterable[Value], module: ModuleModel, guards: Sequence[Guard]) -> Iterator[Value]:
        """Drop the DDP wrappers that cannot be there under `guards`: where `isinstance(m, DDP)`
        (or `hasattr(m, "module")`) is false, and, where the run is not distributed
        (`else` of `if args.distributed:`), wraps made only in distributed runs."""
        resolve = self.model.resolver_for(module)
        unwrapped = single = multi = False
        for guard in guards:
            if guard.negated and _conjunction(guard.test):
                # The `else` of `if a and b:` holds where either is false: it says nothing of `a`
                # (`if args.n_gpu > 1 and not training: model = DataParallel(model)`).
                continue
            wrapped = self.wrapped_test(module, guard.test)
            if wrapped is not None and wrapped == guard.negated:
                unwrapped = True
            distributed = is_distributed_test(guard.test, resolve)
            if distributed is not None:
                if distributed == guard.negated:
                    single = True
                else:
                    multi = True
        if single and multi:
            # Guards read as both "not distributed" and "distributed" (`elif args.local_rank != -1:`
            # after `if args.n_gpu > 1: DataParallel(...)`, where n_gpu counts a process's GPUs,
            # not the ranks): one of the readings is wrong, so neither drops a wrapper.
            single = False
        for value in values:
            if unwrapped and self.model.api_of(value) in (api.DDP, api.DATA_PARALLEL):
                continue
            if single and self._wrapped_when_distributed(value):
                continue
            yield value

    def wrapped_test(self, module: ModuleModel, test: cst.BaseExpression, depth: int = 2) -> bool | None:
        """True for a test that holds when a model is wrapped in DDP (`isinstance(m, DDP)`,
        `hasattr(m, "module")`, or a project predicate whose one return is such a test of its
        parameter: `def is_model_distributed(m): return isinstance(m, DDP)`), False for its
        negation, None otherwise."""
        found = is_wrapped_test(test, self.model.resolver_for(module))
        if found is not None or depth <= 0:
            return found
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.wrapped_test(module, test.expression, depth)
            return None if inner is None else not inner
        site = module.call_at(test) if isinstance(test, cst.Call) and test.args else None
        if site is None:
            return None
        answers = set()
        for function, _ in self.model.graph.targets(site):
            returned = function.module.returns.get(function.qualname, [])
            params = function.params()
            if len(returned) != 1 or not params:
                return None
            tested = _tested_name(returned[0])
            if tested is None or tested != params[0].name:
                return None
            answers.add(self.wrapped_test(function.module, returned[0], depth - 1))
        return answers.pop() if len(answers) == 1 else None

    def _wrapped_when_distributed(self, value: Value) -> bool:
        if self.model.api_of(value) not in (api.DDP, api.DATA_PARALLEL) or value.call is None:
            return False
        site = value.module.call_at(value.call)
        return site is not None and any(
            self.model.paths.kind(site.module, g, site.scope) == "distributed" for g in site.guards)

    def _frame_for(self, scope: Scope, frame: Frame | None) -> Frame | None:
        """Keep the frame when it is the frame of `scope`'s function (a constructor's)."""
        if frame is not None and frame.function.scope is scope:
            return frame
        return None

    def reaching(self, scope: Scope, name: str, at: Point) -> list[tuple[Binding, Point | None]]:
        """The bindings of the local `name` of `scope` that may reach point `at`, with the points
        where they are made ([] when `name` is not local to `scope`)."""
        owner, pairs = self._bindings(scope, name, at)
        return pairs if owner is scope else []

    def _bindings(self, scope: Scope, name: str, at: Point | None) -> tuple[Scope, list[tuple[Binding, Point | None]]]:
        """The scope that binds `name` seen from `scope`, and its bindings seen at `at`: in
        `scope` itself only those that may reach that point; in enclosing scopes (they ran
        before this one is called) all."""
        owner = scope.owner_of(name)
        if owner is None:
            return scope, []
        values = owner.assignments[name]
        points = owner.points.get(name, [])
        if len(points) != len(values):
            points = [None] * len(values)
        if owner is scope and at is not None and scope.kind != "class":
            reaching = scope.reaching(name, at)
            kept = {id(r) for r in reaching}
            return owner, [(v, p) for v, p in zip(values, points) if id(v) in kept]
        return owner, list(zip(values, points))

    def _name(self, module: ModuleModel, node: cst.Name | cst.Attribute, scope: Scope, frame: Frame | None,
              depth: int, seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        name = dotted(node)
        if name is None:  # an attribute of a call or subscript: `DDP(m).module`, `cfg["x"].lr`
            assert isinstance(node, cst.Attribute)
            for base in self._eval(module, node.value, scope, frame, depth - 1, seen, at):
                yield from self._attribute(base, node, module, scope, frame, depth - 1, seen, at)
            return
        owner, bindings = self._bindings(scope, name, at)
        if not bindings and owner is scope and at is not None and name.startswith("self."):
            # `self.model = DDP(self.model)` in a method: before the method's own first
            # assignment, `self.model` is what the instance held when the method was called (the
            # other methods' assignments, as read from any method that does not assign it).
            owner, bindings = self._held_on_entry(scope, name)
        if not bindings and name.startswith("self."):
            inherited = self._inherited(module, scope, name)
            if inherited:
                for base_module, base_scope in inherited:
                    pairs = _left_by_methods(name, [(b, None) for b in base_scope.assignments[name]],
                                             self._left_memo)
                    for binding, _ in pairs:
                        yield from self._eval(base_module, binding, base_scope, None, depth - 1, seen, None)
                return
        if bindings and owner.kind == "class":
            # What each method that sets the attribute leaves when it returns.
            bindings = _left_by_methods(name, bindings, self._left_memo)
            # `trainer.model = DDP(trainer.model)` then `trainer.train()`: in the method,
            # `self.model` is what the caller set on the instance before the call.
            outside, covered = self._set_by_callers(module, name, scope, frame, 3)
            for where, binding, bound_in, bound_frame, point in outside:
                yield from self._eval(where, binding, bound_in, bound_frame, depth - 1, seen, point)
            if covered:
                # Set on every path to every call: the constructor's value was replaced.
                bindings = [(b, p) for b, p in bindings
                            if not (isinstance(b, Shared) and b.scope.name == "__init__")]
                if not bindings:
                    return
            else:
                # A base-class method run on an instance of a project subclass: `self.attr` is
                # also what the subclass's own methods left there.
                for where, binding, bound_in in self._set_by_subclasses(module, owner, scope, name):
                    yield from self._eval(where, binding, bound_in, None, depth - 1, seen, None)
        if bindings:
            inner_frame = frame if owner is scope else self._frame_for(owner, frame)
            for binding, point in bindings:
                passed = _bypassed(point, bindings, at) if owner is scope else []
                guards = (*point.guards, *passed) if point is not None else tuple(passed)
                if guards and any(self._never(module, g, owner, inner_frame) for g in guards):
                    continue  # `else:` of `if args.use_ema:` where that flag is always on
                if isinstance(binding, cst.Dict) and not binding.elements and owner is scope and at is not None \
                        and point is not None and point.tick < at.tick:
                    # An empty dict filled by `d[key] = value` later on: it is read where the
                    # name is (`train(models=models)`), so its entries are the writes before that.
                    point = at
                values = self._eval(module, binding, owner, inner_frame, depth - 1, seen, point)
                if guards:
                    values = self._unwrapped(values, module, guards)
                yield from values
            return
        if isinstance(node, cst.Attribute):
            # `init_distributed_mode(args)` then `args.rank`: what the callee set on the object.
            written = self.model.graph.attribute_writes(module, node, scope, frame, at)
            for where, binding, owner, inner_frame, point in written:
                yield from self._eval(where, binding, owner, inner_frame, depth - 1, seen, point)
            if any(point is not None and not point.guards and not point.loops for *_, point in written):
                return  # set on every path through the callee
            for base in self._eval(module, node.value, scope, frame, depth - 1, seen, at):
                yield from self._attribute(base, node, module, scope, frame, depth - 1, seen, at)
            return
        if scope.owner_of(name) is not None:
            yield Value(module, node, scope, frame, at)  # bound in this scope only later: unknown
            return
        # A global of another module: `from config import LR`.
        target = self.model.resolver.name(module, name, scope)
        if target is not None and target.external is None and target.kind == "value" and target.path is not None:
            other = self.model.project_model(target.path)
            if other is not None and other is not module:
                assigned = other.module_scope.assignments.get(target.name)
                if assigned:
                    for binding in assigned:
                        yield from self._eval(other, binding, other.module_scope, None, depth - 1, seen, None)
                    return
        yield Value(module, node, scope, frame, at)

    def _held_on_entry(self, scope: Scope, name: str) -> tuple[Scope, list[tuple[Binding, Point | None]]]:
        """The class's bindings of `self.attr` (`name`) made in its other methods, for a read in
        the method `scope` that comes before any assignment of its own; (scope, []) where the
        method is not a method of a class or no other method sets it."""
        parent = scope.parent
        if scope.kind != "function" or parent is None or parent.kind != "class" or name not in parent.assignments:
            return scope, []
        values = parent.assignments[name]
        points = parent.points.get(name, [])
        if len(points) != len(values):
            points = [None] * len(values)
        kept = [(v, p) for v, p in zip(values, points) if not (isinstance(v, Shared) and v.scope is scope)]
        return (parent, kept) if kept else (scope, [])

    def _inherited(self, module: ModuleModel, scope: Scope, name: str) -> list[tuple[ModuleModel, Scope]]:
        """`self.device` read in a subclass's method and set only by a project base class
        (`Exp_Basic.__init__` assigning `self.device = self._acquire_device()`): the base's
        class scopes that bind it, nearest first."""
        body: Scope | None = scope
        while body is not None and body.kind != "class":
            body = body.parent
        if body is None:
            return []
        key = (id(body), name)
        memo = self._inherited_memo
        if key not in memo:
            memo[key] = []
            info = next((c for c in module.classes.values() if c.scope is body), None)
            for base_module, base in self.model.graph.mro(module, info)[1:] if info is not None else ():
                if name in base.scope.assignments:
                    memo[key] = [(base_module, base.scope)]
                    break
        return memo[key]

    def _set_by_subclasses(self, module: ModuleModel, owner: Scope, scope: Scope, name: str
                           ) -> list[tuple[ModuleModel, Binding, Scope]]:
        """What the project subclasses that some call builds assign to `self.attr` (`name`) in
        their own methods, for a read in the method of the class `owner` around `scope` that
        those subclasses inherit (`TrainerDDP.__init__` setting `self.valloader` after
        `super().__init__(...)`, read in `TrainerSingle._run_epoch`). An assignment in the
        subclass's `__init__` that a later `super().__init__(...)` may replace is left out."""
        method = scope
        while method.parent is not None and method.parent is not owner:
            method = method.parent
        if method.parent is not owner or method.kind != "function" or method.qualname.endswith(".__init__"):
            return []  # (the base's constructor reads before the subclass's own assignments)
        info = next((c for c in module.classes.values() if c.scope is owner), None)
        if info is None:
            return []
        graph = self.model.graph
        own = Function(module, method.qualname)
        out: list[tuple[ModuleModel, Binding, Scope]] = []
        for sub_module, sub in graph.built_subclasses(module, info):
            if graph.method(sub_module, sub, own.name) != own:
                continue  # the subclass runs its own override
            chain = graph.mro(sub_module, sub)
            below = next((i for i, c in enumerate(chain) if c[1] is info), 0)
            for class_module, cls in chain[:below]:
                assigned = cls.scope.assignments.get(name)
                if not assigned:
                    continue
                for binding, _ in _left_by_methods(name, [(b, None) for b in assigned], self._left_memo):
                    if isinstance(binding, Shared) and binding.scope.qualname.endswith(".__init__") \
                            and _replaced_by_base_init(class_module, binding):
                        continue
                    out.append((class_module, binding, cls.scope))
        return out

    def _set_by_callers(self, module: ModuleModel, name: str, scope: Scope, frame: Frame | None, depth: int
                        ) -> tuple[list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]], bool]:
        """What the callers of the method around `scope` assigned to `self.attr` (`name`) on the
        instance they call it on, before the call (`trainer.model = DDP(trainer.model)`, then
        `trainer.train()`; or `self.model = ...` in the method that calls `self._epoch()`,
        followed up `depth` such calls). Also whether every known call is preceded by such an
        assignment on every path."""
        head, _, attr = name.partition(".")
        function_scope = scope.function
        if not attr or "." in attr or function_scope is None or depth <= 0:
            return [], False
        parent = function_scope.parent
        if parent is None or parent.kind != "class":
            return [], False
        function = Function(module, function_scope.qualname)
        if function.qualname not in module.functions or function.is_static or function.name == "__init__":
            return [], False
        params = function.params()
        if not params or params[0].name != head:
            return [], False
        if frame is not None and frame.function == function:
            calls: list[tuple[CallSite, str, Frame | None]] = [(frame.call, frame.bound, frame.caller)]
        else:
            calls = [(c, b, None) for c, b in self.model.graph.callers(function)[:MAX_CALLERS]
                     if not self.model.paths.dead(c)]
        out: list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]] = []
        covered = bool(calls)
        for call, bound, caller in calls:
            passed = self.model.graph.argument_for(call, function, params[0], bound)
            if not isinstance(passed, cst.Name) or call.point is None:
                covered = False
                continue
            key = f"{passed.value}.{attr}"
            assigned = call.scope.assignments.get(key, [])
            points = call.scope.points.get(key, [])
            here = False
            if assigned and len(points) == len(assigned):
                reaching = call.scope.reaching(key, call.point)
                for binding, point in zip(assigned, points):
                    if any(binding is r for r in reaching):
                        out.append((call.module, binding, call.scope, caller, point))
                        here = here or (point is not None and point.dominates(call.point))
            if not here:
                # `self._epoch()` from a method that got the instance from its own caller.
                above, above_covered = self._set_by_callers(call.module, key, call.scope, caller, depth - 1)
                out += above
                here = above_covered
            covered = covered and here
        return out, covered

    def _attribute(self, base: Value, node: cst.Attribute, module: ModuleModel, scope: Scope, frame: Frame | None,
                   depth: int, seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        """`base.attr`, for the bases the model knows: DDP's `.module`, a DataLoader's `.sampler`
        and `.batch_sampler`, a BatchSampler's `.sampler`, an attribute or property of an
        instance of a project class."""
        attr = node.attr.value
        call = base.call
        if call is not None:
            name = self.model.api_of(base)
            inner: cst.BaseExpression | None = None
            if name == api.DDP and attr == "module":
                inner = argument(call, "module", 0)
            elif name == api.DATALOADER and attr in ("sampler", "batch_sampler", "dataset"):
                inner = argument(call, attr, {"sampler": 3, "batch_sampler": 4, "dataset": 0}[attr])
            elif name == api.BATCH_SAMPLER and attr == "sampler":
                inner = argument(call, "sampler", 0)
            elif name == api.COMPILE and attr == "module":
                # The compiled module forwards attribute reads to the module it compiled:
                # `torch.compile(ddp_model).module` is the DDP wrapper's inner module.
                compiled = argument(call, "model", 0)
                if compiled is not None:
                    for held in self._eval(base.module, compiled, base.scope, base.frame, depth - 1, seen,
                                           self._call_point(base)):
                        yield from self._attribute(held, node, module, scope, frame, depth - 1, seen, at)
                    return
            if inner is not None:
                yield from self._eval(base.module, inner, base.scope, base.frame, depth - 1, seen, self._call_point(base))
                return
            if api.is_attribute_dict(name):
                # `cfg = EasyDict({"lr": 1e-3})` / `SimpleNamespace(lr=1e-3)`: the attribute is the entry.
                given = argument(call, attr)
                if given is not None:
                    yield from self._eval(base.module, given, base.scope, base.frame, depth - 1, seen,
                                          self._call_point(base))
                    return
                first = call.args[0] if call.args else None
                found = False
                if first is not None and first.keyword is None and not first.star:
                    for whole in self._eval(base.module, first.value, base.scope, base.frame, depth - 1, seen,
                                            self._call_point(base)):
                        for entry in self._entry_values(whole, attr, None, depth - 1, seen):
                            found = True
                            yield entry
                if found:
                    return
                # `args = AttrDict(vars(args))`, later `args.update(conf)` with `conf =
                # AttrDict(train_loader=loader)`: the entry the update puts there.
                for entry in self._attribute_dict_updates(base, node, module, scope, frame, depth, seen, at):
                    found = True
                    yield entry
                if found:
                    return
        if call is not None and attr in _BASE_ATTRIBUTES:
            # A project subclass of DataLoader or DDP: what it hands torch's constructor.
            site = base.module.call_at(call)
            for api_class, position in _BASE_ATTRIBUTES[attr] if site is not None else ():
                assert site is not None
                passed = self.model.graph.base_argument(site, api_class, attr, position, base.frame)
                if passed:
                    yield from passed
                    return
        if call is None and isinstance(base.node, (cst.Name, cst.Attribute)) \
                and (last_name(base.node) or "")[:1].isupper():  # (a class is named in CapWords)
            on_class = self.model.graph.class_read(base, attr)  # `Config.lr` of `class Config: lr = 1e-3`
            for read in on_class:
                yield from self._eval(read.module, read.node, read.scope, read.frame, depth - 1, seen, read.at)
            if on_class:
                return
        if call is not None or isinstance(base.node, Param):
            instance = self.model.graph.instance_of(base)
            if instance is not None:
                found = False
                for value in self.model.graph.member_values(instance, base, attr, depth - 1):
                    found = True
                    yield from self._eval(value.module, value.node, value.scope, value.frame, depth - 1, seen, value.at)
                if found:
                    return
        yield Value(module, node, scope, frame, at)

    @staticmethod
    def _call_point(value: Value) -> Point | None:
        """Where the call a leaf holds is made (its arguments are evaluated there)."""
        call = value.call
        site = value.module.call_at(call) if call is not None else None
        return site.point if site is not None else value.at

    def _param(self, module: ModuleModel, param: Param, scope: Scope, frame: Frame | None, depth: int,
               seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        if frame is not None and frame.function.module is module and frame.function.qualname == param.function:
            passed = self.model.graph.argument_for(frame.call, frame.function, param, frame.bound)
            if passed is not None:
                if isinstance(passed, CallSite):  # `self` of a constructor: the new instance
                    yield Value(passed.module, passed.node, passed.scope, frame.caller, passed.point)
                    return
                yield from self._eval(frame.call.module, passed, frame.call.scope, frame.caller, depth - 1, seen,
                                      frame.call.point)
                return
            forwarded = list(self._forwarded(frame.call, param, frame.caller, depth - 1, seen))
            if not forwarded and frame.call.has_star_kwargs:
                forwarded = self._unpacked_keyword(frame.call, param.name, frame.caller)
            if forwarded:
                yield from forwarded
                return
            if param.default is not None:
                yield from self._eval(module, param.default, scope, frame, depth - 1, seen, None)
                return
            yield Value(module, param, scope, frame, at)
            return
        function = Function(module, param.function)
        found = False
        omitted = False  # a known caller leaves the parameter to its default
        callers = [(c, b) for c, b in self.model.graph.callers(function)[:MAX_CALLERS]
                   if not self.model.paths.dead(c)]  # (a helper module's self-test passes nothing to the run)
        for call, bound in callers:
            if bound == "spawn" and _spawn_position(function, param):
                # The process index `mp.spawn` hands its worker first: a value of its own on
                # each process (the local rank), neither a caller's argument nor the default.
                # Beside a plain call (`else: main_worker(args.gpu, args)`) it is still a leaf.
                found = True
                yield Value(module, param, scope, frame, at)
                continue
            passed = self.model.graph.argument_for(call, function, param, bound)
            if passed is None or isinstance(passed, CallSite):
                forwarded = list(self._forwarded(call, param, None, depth - 1, seen))
                if not forwarded and passed is None and call.has_star_kwargs:
                    forwarded = self._unpacked_keyword(call, param.name, None)
                if forwarded:
                    found = True
                    yield from forwarded
                elif passed is None:
                    omitted = True
                continue
            found = True
            yield from self._eval(call.module, passed, call.scope, None, depth - 1, seen, call.point)
        if param.default is not None and (omitted or not found):
            # The default applies where a caller omits the argument, or where no caller is known
            # (a library function: any caller may); not where every known caller passes it.
            if not found and self.cli_bound(function):
                yield Value(module, param, scope, frame, at)  # (or what the command line gives)
            found = True
            yield from self._eval(module, param.default, scope, None, depth - 1, seen, None)
        if not found:
            yield Value(module, param, scope, frame, at)

    def spawn_index(self, module: ModuleModel, param: Param) -> bool:
        """`param` is where `mp.spawn` hands its worker the process index."""
        function = Function(module, param.function)
        return _spawn_position(function, param) and any(
            bound == "spawn" for _, bound in self.model.graph.callers(function))

    def _unpacked_keyword(self, call: CallSite, name: str, frame: Frame | None) -> list[Value]:
        """The entry `name` of the dict `call` unpacks (`train(**kwargs)` after `kwargs =
        dict(loader=loader, ...)`), read once per call and name: a function that hands its own
        `**kwargs` back to itself would ask again for ever."""
        marker = (id(call.node), name)
        if marker in self._unpacking:
            return []
        self._unpacking.add(marker)
        try:
            return self.keyword(call, name, frame=frame)
        finally:
            self._unpacking.discard(marker)

    def cli_bound(self, function: Function) -> bool:
        """The function is handed whole to a command-line binder of its module (`fire.Fire(main)`,
        `typer.run(main)`, jsonargparse's `CLI(main)`): each of its parameters is an option, and
        its defaults are what the command line may change."""
        module = function.module
        if "." in function.qualname:
            return False
        bound = module.memo.get("cli_bound")
        if bound is None:
            bound = set()
            # Read from the imports alone (`site.qualname`): asking `api()` would evaluate values,
            # which ask this again.
            for site in module.calls:
                if site.qualname not in api.CLI_BINDERS:
                    continue
                first = site.node.args[0].value if site.node.args else None
                names = [e.value for e in first.elements] if isinstance(first, (cst.List, cst.Tuple)) else [first]
                bound |= {n.value for n in names if isinstance(n, cst.Name)}
            module.memo["cli_bound"] = bound
        return function.qualname in bound

    def default_in_use(self, value: Value) -> bool | None:
        """Whether `value` (a leaf) is, or sits inside, the default of a parameter of the function
        it is written in, and if so whether that default runs: True when a known caller leaves
        the argument out (`Wrapper(rank, model)` for `optimizer_args={"lr": 1e-3}`), False when no
        caller is known (a library's signature: a choice left to its users) or every one passes
        it. None when `value` is no parameter's default."""
        function = value.scope.function
        node = value.node
        if function is None or not isinstance(node, cst.CSTNode):
            return None
        for bindings in function.assignments.values():
            for param in bindings:
                if not isinstance(param, Param) or param.default is None or param.star:
                    continue
                if param.default is not node and not any(sub is node for sub in subexpressions(param.default)):
                    continue
                owner = Function(value.module, param.function)
                if _config_bound(value.module, param.function) or self.cli_bound(owner):
                    return False  # a configuration file or the command line fills it in

                for call, bound in self.model.graph.callers(owner)[:MAX_CALLERS]:
                    if self.model.paths.dead(call):
                        continue
                    if self.model.graph.argument_for(call, owner, param, bound) is None and \
                            not any(True for _ in self._forwarded(call, param, None, 2, set())):
                        return True
                return False
        return None

    def _forwarded(self, call: CallSite, param: Param, caller: Frame | None, depth: int,
                   seen: set[tuple[int, int]]) -> Iterator[Value]:
        """What reaches keyword `param` of the function `call` runs through `**kwargs` of the
        caller's own function (`def __init__(self, dataset, **kwargs): super().__init__(**kwargs)`,
        called with `lr=1`): the keyword its callers pass by that name, followed up the chain."""
        if param.star or depth <= 0:
            return
        # Chains of `**kwargs` branch at every caller: without a charge on the shared budget and
        # a guard against revisiting a call site, a module of mutually forwarding helpers takes
        # time exponential in the depth. Out of budget, what reaches the keyword is unknown.
        self.budget -= 1
        key = (id(call.node), id(param))
        if self.budget <= 0 or key in seen:
            yield Value(call.module, Unknown(param), call.scope, caller, None)
            return
        seen.add(key)
        try:
            yield from self._forwarded_from(call, param, caller, depth, seen)
        finally:
            seen.discard(key)

    def _forwarded_from(self, call: CallSite, param: Param, caller: Frame | None, depth: int,
                        seen: set[tuple[int, int]]) -> Iterator[Value]:
        for a in call.node.args:
            if a.star != "**" or not isinstance(a.value, cst.Name):
                continue
            bindings = call.scope.lookup(a.value.value)
            if len(bindings) != 1 or not isinstance(bindings[0], Param) or bindings[0].star != "**":
                continue
            outer = Function(call.module, bindings[0].function)
            if caller is not None and caller.function == outer:
                sites: list[tuple[CallSite, Frame | None]] = [(caller.call, caller.caller)]
            else:
                sites = [(c, None) for c, _ in self.model.graph.callers(outer)[:MAX_CALLERS]
                         if not self.model.paths.dead(c)]
            for site, above in sites:
                passed = argument(site.node, param.name)
                if passed is not None:
                    yield from self._eval(site.module, passed, site.scope, above, depth - 1, seen, site.point)
                else:
                    yield from self._forwarded(site, param, above, depth - 1, seen)

    def _yielded(self, module: ModuleModel, node: Element, scope: Scope, frame: Frame | None, depth: int,
                 seen: set[tuple[int, int]], at: Point | None) -> list[Value] | None:
        """`for _, _, loader in make_loaders(files):` where `make_loaders` is a generator of the
        project: what its `yield`s hand out (element `index` of each); None when the iterable is
        anything else (or a callee is not such a generator), and the element stays unknown."""
        call = node.iterable
        if node.index == -1 or not isinstance(call, cst.Call):
            return None
        site = module.call_at(call)
        if site is None:
            return None
        targets = self.model.graph.targets(site)
        if not targets or any(callee.qualname not in callee.module.generators
                               or not callee.module.yields.get(callee.qualname) for callee, _ in targets):
            return None
        found: list[Value] = []
        for callee, bound in targets:
            inner = Frame(callee, site, frame, bound)
            for value in callee.module.yields[callee.qualname]:
                for whole in self._eval(callee.module, value, callee.scope, inner, depth - 1, seen, None):
                    if node.index is None:
                        found.append(whole)
                    else:
                        found.extend(self._item(whole, node.index, depth - 1, seen))
        return found

    def _listed(self, module: ModuleModel, node: Element, scope: Scope, frame: Frame | None, depth: int,
                seen: set[tuple[int, int]], at: Point | None) -> list[Value] | None:
        """`for calc in calcs:` (or `for i, calc in enumerate(calcs):`) where every value of
        `calcs` is a list the code builds (`calcs = [Scorer(t) for t in thresholds]`, `[a, b]`):
        what its elements are. None when any value is something else (the element stays
        unknown)."""
        iterable, index = node.iterable, node.index
        if isinstance(iterable, cst.Call) and dotted(iterable.func) == "enumerate" and len(iterable.args) == 1 \
                and iterable.args[0].keyword is None and not iterable.args[0].star and index == 1:
            iterable, index = iterable.args[0].value, None
        if index is not None or depth <= 1:
            return None
        found: list[Value] = []
        for whole in self._eval(module, iterable, scope, frame, depth - 1, seen, at):
            made = whole.node
            if isinstance(made, cst.ListComp):
                parts: list[cst.BaseExpression] = [made.elt]
            elif isinstance(made, (cst.List, cst.Tuple)) and made.elements \
                    and not any(isinstance(e, cst.StarredElement) for e in made.elements):
                parts = [e.value for e in made.elements]
            else:
                return None
            for part in parts:
                found.extend(self._eval(whole.module, part, whole.scope, whole.frame, depth - 1, seen, whole.at))
        return found or None

    def _item(self, whole: Value, index: int, depth: int, seen: set[tuple[int, int]]) -> Iterator[Value]:
        node = whole.node
        if isinstance(node, (cst.Tuple, cst.List)):
            elements = node.elements
            if index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements[: index + 1]):
                yield from self._eval(whole.module, elements[index].value, whole.scope, whole.frame, depth, seen, whole.at)
                return
        given = self._returned_argument(whole, index)
        if given is not None:
            yield from self._eval(whole.module, given, whole.scope, whole.frame, depth, seen, whole.at)
            return
        yield Value(whole.module, Item(node, index) if isinstance(node, cst.BaseExpression) else node,
                    whole.scope, whole.frame, whole.at)

    def _returns_arguments(self, module: ModuleModel, func: cst.BaseExpression, scope: Scope) -> tuple[str, ...] | None:
        """The parameters a call of `func` hands back (see _RETURNS_ARGUMENTS), or None."""
        last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if last not in _RETURNING_NAMES:
            return None  # (cheap: most calls are not these)
        return _RETURNS_ARGUMENTS.get(self.model.qualname(module, func, scope) or "")

    def _returned_argument(self, whole: Value, index: int) -> cst.BaseExpression | None:
        """Element `index` of what a call that hands back its arguments returns (see
        _RETURNS_ARGUMENTS): the argument it was given there, when every one it returns is given."""
        node = whole.node
        if not isinstance(node, cst.Call) or any(a.star for a in node.args):
            return None
        names = self._returns_arguments(whole.module, node.func, whole.scope)
        if names is None:
            return None
        passed = [argument(node, name, position) for position, name in enumerate(names)]
        if any(p is None for p in passed):
            return None  # `amp.initialize(model)` returns the model itself, not a pair
        return passed[index] if index < len(passed) else None

    def _call(self, module: ModuleModel, node: cst.Call, scope: Scope, frame: Frame | None, depth: int,
              seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        func = node.func
        site = module.call_at(node)
        here = site.point if site is not None else at
        names = self._returns_arguments(module, func, scope) if node.args else None
        if names is not None and not any(a.star for a in node.args):
            if all(argument(node, name, position) is None for position, name in enumerate(names[1:], 1)):
                # `model = amp.initialize(model, opt_level="O1")`: the model, patched in place.
                first = argument(node, names[0], 0)
                if first is not None:
                    yield from self._eval(module, first, scope, frame, depth - 1, seen, here)
                    return
        if isinstance(func, cst.Attribute) and func.attr.value in _PASSTHROUGH and \
                sum(1 for a in node.args if a.keyword is None) <= 1:
            # `model.to(device)` is `model` (moved); `DDP(model).cuda()` is the DDP wrapper.
            yield from self._eval(module, func.value, scope, frame, depth - 1, seen, here)
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "apply" and len(node.args) == 1:
            # `DDP(net).apply(weights_init)`: `Module.apply` hands back the module (not so a
            # DataFrame's `apply`, hence only for the DDP wrapper).
            held = list(self._eval(module, func.value, scope, frame, depth - 1, seen, here))
            if held and all(self.model.api_of(v) == api.DDP for v in held):
                yield from held
                return
        if site is not None and not (site.target is not None and site.target.kind == "class"):
            # (A constructor's value is the new instance, the call itself: its class need not be read.)
            followed = False
            for callee, bound in self.model.graph.targets(site):
                if callee.qualname.rsplit(".", 1)[-1] == "__init__" and bound:
                    continue  # a constructor: the value is the new instance (the call itself)
                returns = callee.module.returns.get(callee.qualname)
                if not returns:
                    continue
                followed = True
                inner = Frame(callee, site, frame, bound)
                for value in returns:
                    point = callee.module.return_points.get(id(value))
                    found = self._eval(callee.module, value, callee.scope, inner, depth - 1, seen, point)
                    if point is not None and point.guards:
                        # `if is_wrapped(m): return m.module` / `else: return m`: no wrapper there.
                        found = self._unwrapped(found, callee.module, point.guards)
                    yield from found
            if followed:
                return
        yield Value(module, node, scope, frame, here)

    def _subscript(self, module: ModuleModel, node: cst.Subscript, scope: Scope, frame: Frame | None, depth: int,
                   seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = node.slice[0].slice.value
            text = key.evaluated_value if isinstance(key, cst.SimpleString) else None
            number = int_value(key)
            found = False
            bases = list(self._eval(module, node.value, scope, frame, depth - 1, seen, at))
            if not isinstance(text, str) and number is None and not isinstance(key, (cst.SimpleString, cst.Integer)):
                # `MODELS[name]` with a key known only at run time: any entry of a table written
                # as one dict literal; unknown when a base is anything else.
                entries = [self._table_entries(b) for b in bases]
                if bases and any(e is not None for e in entries):
                    # (A base that is no table — a list filled by `append` on another branch —
                    # leaves the subscript itself among the values: unknown there.)
                    for base, table in zip(bases, entries):
                        for part in table or ():
                            yield from self._eval(base.module, part, base.scope, base.frame, depth - 1, seen, base.at)
                    if not all(e is not None for e in entries):
                        yield Value(module, node, scope, frame, at)
                    return
            if isinstance(text, str) and isinstance(node.value, cst.Name):
                given = self._star_keyword(module, node.value.value, text, scope, frame, depth, seen)
                if given is not None:
                    yield from given
                    return
            written = self._written_entry(module, node.value, text, scope, at) if isinstance(text, str) else None
            if written is not None:
                # `cfg["lr"] = 1e-3` after `cfg = load_config()`: the entry as the script last set
                # it; `if cfg.use_ddp: models["gen"] = DDP(...)` / `else: models["gen"] = ...`:
                # as either arm (or the one write before them) left it.
                for value in written:
                    yield from self._eval(module, value, scope, frame, depth - 1, seen, at)
                return
            filled = self._filled_by_key(module, node.value, text, scope, at) if isinstance(text, str) else None
            if filled:
                # `loaders = {}`, then `for split in splits: loaders[split] = DataLoader(...)`:
                # `loaders["val"]` is one of the values written under a key known at run time.
                for value in filled:
                    yield from self._eval(module, value, scope, frame, depth - 1, seen, at)
                return
            if isinstance(text, str) and any(self._rewritten_by_unknown_key(b) for b in bases):
                # `config_ = {"lr": 0.1, ...}`, then `for k in given: config_[k] = given[k]`:
                # any entry may be the caller's.
                yield Value(module, node, scope, frame, at)
                return
            for base in bases:
                later = self._written_later(base, text) if isinstance(text, str) else None
                if later is not None:
                    # `models = {}; models["gen"] = DDP(...)`, then `train(models=models)` reads
                    # `models["gen"]`: the entry as the writes before that call left it.
                    for value in later:
                        found = True
                        yield from self._eval(base.module, value, base.scope, base.frame, depth - 1, seen, base.at)
                    continue
                for entry in self._entry_values(base, text if isinstance(text, str) else None, number, depth - 1, seen):
                    found = True
                    yield entry
            if found:
                return
        yield Value(module, node, scope, frame, at)

    def _star_keyword(self, module: ModuleModel, name: str, key: str, scope: Scope, frame: Frame | None,
                      depth: int, seen: set[tuple[int, int]]) -> list[Value] | None:
        """`kwargs["net"]` of a function's `**kwargs` parameter never rebound there: the keyword
        argument `net=` of each known call (`MultiTrainer(net=net, ...)` for `def __init__(self,
        **kwargs): self.net = kwargs["net"]`), in `frame`'s call where it is the function's. None
        when no call is known or one of them passes the keyword through `**` (not known here)."""
        function = scope.function
        bindings = function.assignments.get(name, []) if function is not None else []
        if len(bindings) != 1 or not isinstance(bindings[0], Param) or bindings[0].star != "**":
            return None
        param = bindings[0]
        owner = Function(module, param.function)
        if frame is not None and frame.function.module is module and frame.function.qualname == param.function:
            calls: list[tuple[CallSite, Frame | None]] = [(frame.call, frame.caller)]
        else:
            calls = [(c, None) for c, _ in self.model.graph.callers(owner)[:MAX_CALLERS] if not self.model.paths.dead(c)]
        out: list[Value] = []
        for call, caller in calls:
            passed = next((a.value for a in call.node.args if a.keyword is not None and a.keyword.value == key), None)
            if passed is None:
                if call.has_star_kwargs:
                    return None
                continue  # (a `KeyError` there, or a `.get` default: nothing this call gives)
            out += self._eval(call.module, passed, call.scope, caller, depth - 1, seen, call.point)
        return out or None

    @staticmethod
    def _rewritten_by_unknown_key(base: Value) -> bool:
        """A dict literal with entries, bound to a name in its scope, that the scope then writes
        under keys known only at run time (`defaults[k] = given[k]` in a loop, `defaults.update(given)`):
        its literal entries may not be what it holds."""
        node = base.node
        if not isinstance(node, cst.Dict) or not node.elements:
            return False
        names = [n for n in base.module.assigned_names(node) if "." not in n]
        if len(names) != 1:
            return False
        # (Any such write in the scope: the dict leaves it by `return` after them, while the point
        # it was reached at is its own binding.)
        return any(key in (None, "") for key, _, _, _ in base.scope.updates.get(names[0], ()))

    def _written_later(self, base: Value, key: str) -> list[cst.BaseExpression] | None:
        """For a dict literal reached from another scope (`models = {}` in the caller that passes
        `models` to the function reading `models["gen"]`), the values that the writes of `key`
        in its own scope, before the point it was reached at, leave there (see `_written_entry`);
        None when those do not decide."""
        node = base.node
        if not isinstance(node, cst.Dict) or node.elements or base.at is None:
            return None
        names = [n for n in base.module.assigned_names(node) if "." not in n]
        if len(names) != 1 or not any(b is node for b in base.scope.assignments.get(names[0], ())):
            return None
        target = cst.Name(names[0])
        return self._written_entry(base.module, target, key, base.scope, base.at)

    @staticmethod
    def _written_entry(module: ModuleModel, base: cst.BaseExpression, key: str, scope: Scope,
                       at: Point | None) -> list[cst.BaseExpression] | None:
        """The values the writes `name[key] = value` in `scope` that may reach `at` put there,
        back to the first that always runs before `at`: one value when that is the last write
        (`cfg["lr"] = 1e-3` after `cfg = load_config()`), several where the writes after it sit in
        the arms of an `if` (`models["gen"] = build()`, then `models["gen"] = DDP(...)` in one arm
        and `models["gen"] = ...to(rank)` in the other). None when the entry may hold what no
        write there gives (no such write, an `update`, a key not written as a literal, `name`
        bound again after it)."""
        name = dotted(base)
        if name is None or at is None:
            return None
        found: list[cst.BaseExpression] = []
        for entry_key, value, _, point in reversed(scope.updates.get(name, ())):
            if not point.reaches(at):
                continue
            if entry_key is not None and entry_key != "" and entry_key != key:
                continue  # another entry
            if entry_key != key:
                return None
            if any(p is not None and p.tick > point.tick and p.reaches(at) for p in scope.points.get(name, ())):
                return None
            found.append(value)
            if point.dominates(at):
                return found
        return None

    def _filled_by_key(self, module: ModuleModel, base: cst.BaseExpression, key: str, scope: Scope,
                       at: Point | None) -> list[cst.BaseExpression] | None:
        """The values a dict bound once to an empty literal (`loaders = {}`) in `scope` is filled
        with before `at`, when every write that may reach `at` puts them under a key known only
        at run time (`loaders[split] = ...`) or under `key` itself, and the dict is handed to no
        project function that writes entries; else None."""
        name = dotted(base)
        if name is None or at is None or not isinstance(base, cst.Name):
            return None
        bound = scope.assignments.get(name, [])
        if len(bound) != 1 or not isinstance(bound[0], cst.Dict) or bound[0].elements:
            return None
        if self._handed_to_writer(module, bound[0]):
            return None
        writes = [(k, v) for k, v, _, point in scope.updates.get(name, ()) if point.reaches(at)]
        if not writes or any(k != "" and k != key for k, _ in writes) or all(k == key for k, _ in writes):
            return None
        return [v for _, v in writes]

    @staticmethod
    def _table_entries(base: Value) -> list[cst.BaseExpression] | None:
        """The values of a dict literal of plain entries (no `**` merge), whatever its keys
        (`{"nccl": DDPBackend, None: SingleBackend}`), or the one value every element of a
        replicated list (`[loader] * n`) or a list comprehension holds, whatever the index; or
        None."""
        node = base.node
        if isinstance(node, cst.ListComp):
            # `[DataLoader(...) for _ in range(world_size)]`: every element is what it computes.
            return [node.elt]
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) \
                and isinstance(node.left, (cst.List, cst.Tuple)) and len(node.left.elements) == 1 \
                and not isinstance(node.left.elements[0], cst.StarredElement):
            # `[loader] * world_size`: every element is that one object.
            return [node.left.elements[0].value]
        if not isinstance(node, cst.Dict) or not node.elements \
                or not all(isinstance(e, cst.DictElement) for e in node.elements):
            return None
        return [e.value for e in node.elements]

    def _entry_values(self, base: Value, key: str | None, number: int | None, depth: int,
                      seen: set[tuple[int, int]]) -> Iterator[Value]:
        """The values entry `key` (or element `number`) of a leaf may hold: `{"k": v}`, `dict(k=v)`,
        `(a, b)[1]`, and the dicts merged into one (`{**a, **b}`, `dict(a, **b)`, `a | b`: the
        last that sets the key wins; a merged dict that may lack it lets earlier ones through)."""
        node = base.node
        if depth <= 0:
            return
        if isinstance(node, cst.DictComp) and (key is not None or number is not None):
            # `{split: DataLoader(sets[split], sampler=samplers[split]) for split in splits}`:
            # whatever the key, an entry is what the comprehension computes.
            yield from self._eval(base.module, node.value, base.scope, base.frame, depth, seen, base.at)
            return
        if number is not None and isinstance(node, (cst.Tuple, cst.List)):
            elements = node.elements
            if 0 <= number < len(elements) and not isinstance(elements[number], cst.StarredElement):
                yield from self._eval(base.module, elements[number].value, base.scope, base.frame, depth, seen, base.at)
            return
        if key is None:
            return
        if isinstance(node, cst.Dict) and self._handed_to_writer(base.module, node):
            return  # (`update_args(defaults, cmd_args)` may rewrite any entry: unknown)
        for part, named in reversed(_merged_parts(node) or ()):
            if named is not None:
                if named == key:
                    yield from self._eval(base.module, part, base.scope, base.frame, depth, seen, base.at)
                    return
                continue
            named_part = dotted(part)
            if named_part is not None and base.frame is None:
                yield from self._updated(base.module, base.scope, named_part, key, base.at)
            for inner in self._eval(base.module, part, base.scope, base.frame, depth - 1, seen, base.at):
                yield from self._entry_values(inner, key, None, depth - 1, seen)

    def _handed_to_writer(self, module: ModuleModel, node: cst.Dict) -> bool:
        """The dict literal `node`, bound to a name, is passed under that name to a project
        function that writes entries of the parameter it arrives in (`args[key] = value`,
        `args.update(...)`): a defaults table that the command line overrides in place."""
        memo: dict[int, bool] | None = module.memo.get("handed_to_writer")
        if memo is None:
            memo = module.memo["handed_to_writer"] = {}
        found = memo.get(id(node))
        if found is not None:
            return found
        memo[id(node)] = False  # (met again while reading the callee: not known to be written)
        scopes = [module.module_scope, *module.function_scopes.values()]
        owners = {name: scope for name in module.assigned_names(node) for scope in scopes
                  if any(b is node for b in scope.assignments.get(name, ()))}
        found = False
        graph = self.model.graph
        for site in module.calls if owners else ():
            if not any(isinstance(a.value, cst.Name) and a.value.value in owners
                       and site.scope.owner_of(a.value.value) is owners[a.value.value] for a in site.node.args):
                continue  # (the same name in another scope, a parameter there, is another object)
            for callee, bound in graph.targets(site):
                for param in {p for b in callee.scope.assignments.values() for p in b if isinstance(p, Param)}:
                    if not callee.scope.updates.get(param.name):
                        continue
                    passed = graph.argument_for(site, callee, param, bound)
                    if isinstance(passed, cst.Name) and passed.value in owners:
                        found = True
        memo[id(node)] = found
        return found

    def mapping_keys(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope,
                     at: Point | None = None) -> set[str] | None:
        """Every key the dict `expr` may hold at `at` (literal dicts, `dict(...)`, merges, and the
        entries added to a named dict later, under any condition); None when a part is unknown."""
        keys: set[str] = set()
        name = dotted(expr)
        if isinstance(expr, cst.Name):
            for _, _, entry_key, _ in self._callee_updates(module, scope, expr.value, at):
                if not entry_key:
                    return None  # (a key not written as a literal, or an `update`)
                keys.add(entry_key)
        if name is not None:
            for s in scope.chain():
                for entry_key, value, _, _ in s.updates.get(name, ()):
                    if entry_key:
                        keys.add(entry_key)
                        continue
                    if entry_key == "":
                        return None  # `kw[name] = v`: a key not written as a string
                    more = self.mapping_keys(module, value, s, at if s is scope else None)
                    if more is None:
                        return None
                    keys |= more
        for leaf in self.of(module, expr, scope, at=at, depth=8):
            more = self._leaf_keys(leaf, 4)
            if more is None:
                return None
            keys |= more
        return keys

    def _leaf_keys(self, value: Value, depth: int) -> set[str] | None:
        parts = _merged_parts(value.node)
        if parts is None or depth <= 0:
            return None
        keys: set[str] = set()
        for part, named in parts:
            if named is not None:
                keys.add(named)
                continue
            for inner in self.of(value.module, part, value.scope, value.frame, depth=8, at=value.at):
                more = self._leaf_keys(inner, depth - 1)
                if more is None:
                    return None
                keys |= more
        return keys

    # --- paths: tests decided by values, one evaluation per caller --------------------------------
    def outcome(self, module: ModuleModel, test: cst.BaseExpression, scope: Scope, frame: Frame | None = None,
                at: Point | None = None, parameters_only: bool = True) -> bool | None:
        """The value of a test where it is read, when the values it reads decide it: a flag the
        command line cannot change, or a parameter every value of which (the argument of the call
        followed, or of every known caller, and the default) makes it come out the same (`if
        save:` with `save=False` passed or by default, `mode == "eval"`, `model is not None`, and
        `not`/`and`/`or` of such). `parameters_only=False` reads any name or `self.x` the same
        way, and a None test of an attribute of a name every value of which is known never to be
        None (`args.gpu is None` after `args.gpu = dist.get_rank()`). None when not known."""
        fixed = constant_flag(module, test)
        if fixed is None:
            fixed = _module_switch(module, test)
        if fixed is not None:
            return fixed
        if self._testing >= 2 or self.budget <= 0:
            return None
        key = (id(test), id(frame) * 2 + parameters_only)
        if frame is None and at is None and key in self._outcomes:
            return self._outcomes[key]
        self._testing += 1
        try:
            found = self._outcome(module, test, scope, frame, at, parameters_only)
        finally:
            self._testing -= 1
        if frame is None and at is None and self.whole:
            self._outcomes[key] = found
        return found

    def _outcome(self, module: ModuleModel, test: cst.BaseExpression, scope: Scope, frame: Frame | None,
                 at: Point | None, parameters_only: bool) -> bool | None:
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._outcome(module, test.expression, scope, frame, at, parameters_only)
            return None if inner is None else not inner
        if isinstance(test, cst.BooleanOperation):
            left = self._outcome(module, test.left, scope, frame, at, parameters_only)
            if isinstance(test.operator, cst.And) and left is False or isinstance(test.operator, cst.Or) and left:
                return left
            right = self._outcome(module, test.right, scope, frame, at, parameters_only)
            if isinstance(test.operator, cst.And):
                return False if right is False else (True if left and right else None)
            return True if right else (False if left is False and right is False else None)
        if isinstance(test, cst.Call):
            if dotted(test.func) == "isinstance":
                return self._type_test(module, test, scope, frame, at)
            return self._never_set(module, test, scope, frame, at)
        if isinstance(test, cst.Name) and _names_a_definition(module, scope, test.value):
            return True  # `if not evaluate:` of a function defined here: a function object is always true
        reading = literal_test(test)
        if reading is None:
            if not parameters_only:
                return self._attribute_none_test(module, test, scope, frame, at)
            return None
        name, judge = reading
        if parameters_only and not (isinstance(name, cst.Name) and _only_a_parameter(scope, name.value)):
            return None  # (an attribute of a config object may be set anywhere: not decided here)
        values = self.of(module, name, scope, frame, depth=8, at=at)
        if not values:
            return None
        truths = {judge(self._literal(v)) for v in values}
        return truths.pop() if len(truths) == 1 else None

    def _attribute_none_test(self, module: ModuleModel, test: cst.BaseExpression, scope: Scope,
                             frame: Frame | None, at: Point | None) -> bool | None:
        """`args.gpu is None` / `args.gpu is not None` on an attribute of a plain name whose every
        value the flow finds is known never to be None (`args.gpu = dist.get_rank()` in the caller
        before `main_worker(args)`): False / True. Only that way round: an attribute the flow
        cannot follow everywhere stays an unknown leaf, and a None it finds may be replaced by
        whatever fills a config object, so a None value decides nothing."""
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        comp = test.comparisons[0]
        if not isinstance(comp.operator, (cst.Is, cst.IsNot)) or not is_none(comp.comparator):
            return None
        name = test.left
        if not isinstance(name, cst.Attribute) or not isinstance(name.value, cst.Name) \
                or name.value.value in ("self", "cls"):
            return None
        values = self.of(module, name, scope, frame, depth=8, at=at)
        if not values or not all(self._not_none(v) for v in values):
            return None
        return isinstance(comp.operator, cst.IsNot)

    def _never_set(self, module: ModuleModel, test: cst.Call, scope: Scope, frame: Frame | None,
                   at: Point | None) -> bool | None:
        """`getattr(state, "is_distributed", False)` / `hasattr(state, "is_distributed")` on an
        instance of a project class when no code of the run ever names that attribute other than
        in such reads or in reads of it as an attribute (`model.module.state_dict()` in the arm
        the test guards; no field, no `self.x =`, no keyword, no string elsewhere): the default
        (False), whatever the run. None when not known."""
        func = dotted(test.func)
        args = test.args
        if func not in ("getattr", "hasattr") or len(args) != (3 if func == "getattr" else 2) \
                or any(a.keyword is not None or a.star for a in args):
            return None
        key = args[1].value
        text = key.evaluated_value if isinstance(key, cst.SimpleString) else None
        if not isinstance(text, str) or not text.isidentifier():
            return None
        truth = _truth(args[2].value) if func == "getattr" else False
        if truth is None:
            return None
        values = self.of(module, args[0].value, scope, frame, depth=8, at=at)
        graph = self.model.graph
        classes = [found for v in values for found in graph.instances_of(v)]
        if not values or not classes or any(not graph.instances_of(v) for v in values):
            return None
        texts = graph.import_closure(module) + [m.source for m, _ in classes]
        if not all(_only_read(text, t) for t in texts):
            return None
        return truth

    def _type_test(self, module: ModuleModel, test: cst.Call, scope: Scope, frame: Frame | None,
                   at: Point | None) -> bool | None:
        """`isinstance(text, str)` on a local name every value of which (in the call followed) is a
        literal of a known type: an f-string, `"=" * 30 + msg`, a number, a dict display. None
        when some value's type is not known."""
        args = test.args
        if len(args) != 2 or any(a.keyword is not None or a.star for a in args):
            return None
        name, kind = args[0].value, args[1].value
        if not isinstance(name, cst.Name) or not isinstance(kind, cst.Name) or kind.value not in _LITERAL_TYPES:
            return None
        values = self.of(module, name, scope, frame, depth=8, at=at)
        kinds = {_literal_type(v.node) for v in values}
        if not kinds or None in kinds:
            return None
        truths = {found == kind.value for found in kinds}
        return truths.pop() if len(truths) == 1 else None

    def never_none(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """Whether `expr`, read where `site` is called, is known never to be None: every leaf is a
        literal, an object a constructor or an outside API makes, arithmetic, or text a string
        method or `str`/`int`/`len` returns (`args.gpu = gpu` of a worker called with a spawn index or
        `",".join(gpus)`)."""
        values = self.at_call(site, expr)
        return bool(values) and all(self._not_none(v) for v in values)

    def _not_none(self, value: Value) -> bool:
        if _noneness(self._literal(value)) is False:
            return True
        node = value.node
        if isinstance(node, Param):
            return self.spawn_index(value.module, node)  # (a process index: an int)
        if isinstance(node, (cst.BinaryOperation, cst.ConcatenatedString)):
            return True
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Name) and func.value in ("str", "int", "float", "len", "bool"):
                return True
            return isinstance(func, cst.Attribute) and isinstance(func.value, (cst.SimpleString, cst.FormattedString)) \
                and func.attr.value in ("join", "format")
        return False

    def _literal(self, value: Value) -> object:
        """A leaf as `literal_test`'s judges read it: the literal node, or NOT_NONE for an object
        a constructor or an outside API makes (never None, never a literal)."""
        node = value.node
        if isinstance(node, (cst.Dict, cst.List, cst.Tuple, cst.Set, cst.Lambda, cst.ListComp, cst.DictComp,
                             cst.SetComp, cst.FormattedString)):
            return NOT_NONE
        if isinstance(node, cst.Call):
            site = value.module.call_at(node)
            if site is not None and (site.target is not None and site.target.kind == "class"
                                     or self.model.api(site) is not None):
                return NOT_NONE
        return node

    def frames(self, site: CallSite) -> list[Frame | None]:
        """The frames to read `site`'s arguments in, one per path into its function: a frame for
        each known caller when the function takes parameters (the values of one call go
        together: `build(ds, sampler=DistributedSampler(ds), shuffle=False)` and `build(ds)` are
        two loaders, not one with both), else [None]."""
        function = site.scope.function
        if function is None:
            return [None]
        callee = Function(site.module, function.qualname)
        params = [p for p in callee.params() if not (p.index == 0 and function.parent is not None
                                                      and function.parent.kind == "class")]
        if not params:
            return [None]
        callers = self.model.graph.callers(callee)
        if not callers or len(callers) > MAX_CALLERS:
            return [None]
        found: list[Frame | None] = [Frame(callee, call, None, bound) for call, bound in callers
                                     if not self.model.paths.dead(call)]
        return found or [None]

    def same_value(self, module: ModuleModel, scope: Scope, a: Binding, a_at: Point | None, b: Binding,
                   b_at: Point | None) -> bool:
        """Whether two bindings of one scope give the same value: the same expression, reading
        names and attributes whose values reaching each point are the same bindings, and calling
        nothing but pure builtins (`epochs = opt.epochs` on every rank and again, on a resume
        path, under `if rank == 0:`)."""
        if not isinstance(a, cst.BaseExpression) or not isinstance(b, cst.BaseExpression) or a_at is None \
                or b_at is None:
            return False
        if " ".join(module.code(a).split()) != " ".join(module.code(b).split()):
            return False
        for node in subexpressions(a):
            if isinstance(node, cst.Call) and dotted(node.func) not in _PURE:
                return False
        for name in _read_names(a):
            for part in _prefixes(name):
                if scope.owner_of(part) is scope and [id(v) for v in scope.reaching(part, a_at)] != \
                        [id(v) for v in scope.reaching(part, b_at)]:
                    return False
        return True

    @staticmethod
    def same_object(a: Value, b: Value) -> bool:
        """Whether two leaves may be one object: the same node reached through the same calls.
        A factory's one return expression (`def init_obj(...): return getattr(module, name)(...)`)
        makes a new object per call, so the leaf reached through `init_obj("model", ...)` is not
        the one reached through `init_obj("optimizer", ...)`. Where one side's frames are not
        known (a leaf read without its caller), they may be the same."""
        if a.node is not b.node:
            return False
        fa, fb = a.frame, b.frame
        while fa is not None and fb is not None:
            if fa.call.node is not fb.call.node:
                return False
            fa, fb = fa.caller, fb.caller
        return True

    @staticmethod
    def compatible(*values: Value) -> bool:
        """Whether leaves can be chosen together in one run: not when two of them are chosen in
        opposite arms of one `if` (or `a if c else b`). A test held true that is an `and` holds
        each of its parts too, and one held false that is an `or` fails each of its parts: the
        arm of `if ddp and split != "test":` meets `... if ddp else ...` only on `ddp`'s true arm."""
        taken: dict[object, bool] = {}
        for value in values:
            for guard in value.conditions:
                for key, negated in _held_parts(value, guard.test, guard.negated, _guard_key(value, guard)):
                    side = taken.setdefault(key, negated)
                    if side != negated:
                        return False
        return True

    # --- keyword arguments through dicts -------------------------------------------------------
    def at_call(self, site: CallSite, expr: cst.BaseExpression, frame: Frame | None = None,
                at: Point | None = None) -> list[Value]:
        """What `expr`, an argument or receiver of `site`, may hold where the call is made (in
        `frame`, one of `frames(site)`, when given; on the path `at` — see `along` —, when given)."""
        return self.of(site.module, expr, site.scope, frame, at=at or site.point)

    @staticmethod
    def along(site: CallSite, value: Value) -> Point:
        """The point of `site` on the path where `value` (a leaf of one of its arguments) is
        chosen: the arms of the `if`s of `site`'s scope the leaf was chosen in are taken, so the
        bindings made in them hide earlier ones (`shuffle = True`, then `if distributed: sampler
        = DistributedSampler(ds); shuffle = False`: where the sampler is made, shuffle is False)."""
        if value.scope is not site.scope or value.module is not site.module:
            return site.point
        held = {id(g.node) for g in site.guards}
        extra = tuple(g for g in value.conditions if id(g.node) not in held)
        return Point(site.tick, site.loops, site.guards + extra) if extra else site.point

    def keyword(self, call: CallSite, keyword: str, position: int | None = None,
                frame: Frame | None = None, at: Point | None = None) -> list[Value]:
        """The values passed to `keyword` of `call`: directly, or through `**kwargs` built as a
        dict literal, `dict(...)`, `kw.update(...)` or `kw["key"] = value` (entries added under
        a condition that the call is not under do not count). `at`: as for `at_call`."""
        direct = call.arg(keyword, position)
        if direct is not None:
            return self.at_call(call, direct, frame, at)
        out: list[Value] = []
        for a in call.node.args:
            if a.star != "**":
                continue
            out += self._from_mapping(call, a.value, keyword, frame)
        return out

    def _from_mapping(self, call: CallSite, expr: cst.BaseExpression, key: str, frame: Frame | None) -> list[Value]:
        out: list[Value] = []
        name = dotted(expr)
        if name is not None:
            out += self._updated(call.module, call.scope, name, key, call.point)
            if isinstance(expr, cst.Name):
                out += self._written_by_callees(call, expr.value, key)
        out += self._entries(call.module, expr, call.scope, key, call.point, frame)
        return out

    def _written_by_callees(self, call: CallSite, name: str, key: str) -> list[Value]:
        """What a project function handed the dict `name` before `call` (in the same function,
        on a path `call` is on) writes under `key` into its parameter: `self.get_sampler(ds,
        params)` whose body does `params["sampler"] = sampler`, then `DataLoader(ds, **params)`."""
        out: list[Value] = []
        for earlier, function, entry_key, value in self._callee_updates(call.module, call.scope, name, call.point):
            if entry_key == key and earlier.loops == call.loops and all(g in call.guards for g in earlier.guards):
                out += self.of(function.module, value, function.scope)
        return out

    def _callee_updates(self, module: ModuleModel, scope: Scope, name: str, at: Point | None
                        ) -> Iterator[tuple[CallSite, Function, str | None, cst.BaseExpression]]:
        """The entries project functions write into the dict `name` of `scope` when it is handed
        to them before `at` (`fill(params)` whose body does `params["k"] = v`): the call, the
        function, the key ("" when not a literal, None for an `update`) and the value, written on
        every path through the function."""
        for earlier in self.model.graph.passing(module, scope).get(name, ()):
            if at is not None and earlier.tick >= at.tick:
                continue
            for function, bound in self.model.graph.targets(earlier):
                for param in function.params():
                    passed = self.model.graph.argument_for(earlier, function, param, bound)
                    if isinstance(passed, cst.Name) and passed.value == name:
                        for entry_key, value, guards, _ in function.scope.updates.get(param.name, ()):
                            if not guards:
                                yield earlier, function, entry_key, value

    def written_into(self, site: CallSite, expr: cst.BaseExpression) -> list[Value]:
        """What the entries written into the dict `expr` (a name of `site`'s own scope) before
        `site` may hold, whatever their keys: `d["k"] = v` and `d.update(k=v)` give `v`,
        `d.update(other)` gives `other` whole. Only writes on a path to `site` count, and none
        that `expr` is bound again after."""
        name = dotted(expr)
        if name is None:
            return []
        scope, at = site.scope, site.point
        out: list[Value] = []
        arms = {(id(g.node), g.negated) for g in at.guards}
        for _, value, guards, point in scope.updates.get(name, ()):
            # Earlier in the same pass, not in the other arm of an `if` around the site (a loop
            # that brings a write round to the next pass meets the `d = {}` that starts it).
            if point.tick >= at.tick or any((id(g.node), not g.negated) in arms for g in guards):
                continue
            if any(p is not None and p.tick > point.tick and p.reaches(at) for p in scope.points.get(name, ())):
                continue  # (bound to another dict after this write)
            out += self.of(site.module, value, scope, at=point)
        return out

    def _attribute_dict_updates(self, base: Value, node: cst.Attribute, module: ModuleModel, scope: Scope,
                                frame: Frame | None, depth: int, seen: set[tuple[int, int]],
                                at: Point | None) -> Iterator[Value]:
        """Entry `node.attr` as the `update(...)` calls on a name bound to the attribute dict
        `base` set it, in the scope that made it: `name.update(key=v)`, or `name.update(other)`
        with `other` an attribute dict or a dict that has the key."""
        attr = node.attr.value
        for name in base.scope.updates:  # (few names are updated: looked up from them)
            marker = (id(base.scope), name)
            if marker in self._expanding or not any(b is base.node for b in base.scope.assignments.get(name, ())):
                continue
            self._expanding.add(marker)
            try:
                for key, value, _, point in base.scope.updates.get(name, ()):
                    if key == attr:
                        yield from self._eval(base.module, value, base.scope, base.frame, depth - 1, seen, point)
                    elif key is None:
                        for held in self._eval(base.module, value, base.scope, base.frame, depth - 1, seen, point):
                            if held.call is not None and api.is_attribute_dict(self.model.api_of(held)):
                                yield from self._attribute(held, node, module, scope, frame, depth - 1, seen, at)
                            else:
                                yield from self._entry_values(held, attr, None, depth - 1, seen)
            finally:
                self._expanding.discard(marker)

    def _updated(self, module: ModuleModel, scope: Scope, name: str, key: str, at: Point | None) -> list[Value]:
        """What the entries added to the dict `name` later (`kw.update(...)`, `kw["k"] = v`) put
        under `key`, as seen at `at` (entries added under a condition `at` is not under do not
        count)."""
        out: list[Value] = []
        marker = (id(scope), name)
        if marker in self._expanding:
            return out  # `kw.update(other)` where `other` takes entries of `kw`: a cycle
        self._expanding.add(marker)
        try:
            self._updated_into(out, module, scope, name, key, at)
        finally:
            self._expanding.discard(marker)
        return out

    def _updated_into(self, out: list[Value], module: ModuleModel, scope: Scope, name: str, key: str,
                      at: Point | None) -> None:
        arms = {(id(g.node), g.negated) for g in at.guards} if at is not None else set()
        for s in scope.chain():
            for entry_key, value, guards, _ in s.updates.get(name, ()):
                if not all((id(g.node), g.negated) in arms for g in guards):
                    continue
                if entry_key == key:
                    out += self.of(module, value, s, at=at if s is scope else None)
                elif entry_key is None:  # kw.update({...}) / kw.update(other)
                    out += self._entries(module, value, s, key, at if s is scope else None)

    def _entries(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope, key: str, at: Point | None,
                 frame: Frame | None = None) -> list[Value]:
        out: list[Value] = []
        for base in self.of(module, expr, scope, frame, at=at):
            for value in self._entry_values(base, key, None, DEPTH, set()):
                out.append(value)
                if len(out) >= MAX_LEAVES:
                    return out
        return out


def _merged_parts(node: Leaf) -> list[tuple[cst.BaseExpression, str | None]] | None:
    """The parts of a dict expression in the order they are applied: (value, its key) for an entry
    with a literal key, (mapping, None) for a mapping merged in; None for anything that is not a
    dict expression (or a dict with a key that is not a literal string)."""
    parts: list[tuple[cst.BaseExpression, str | None]] = []
    if isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.StarredDictElement):
                parts.append((element.value, None))
            elif isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                    and isinstance(element.key.evaluated_value, str):
                parts.append((element.value, element.key.evaluated_value))
            else:
                return None
        return parts
    if isinstance(node, cst.Call) and dotted(node.func) == "dict":
        for a in node.args:
            if a.keyword is not None:
                parts.append((a.value, a.keyword.value))
            elif a.star == "**" or not a.star:
                parts.append((a.value, None))
            else:
                return None
        return parts
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return [(node.left, None), (node.right, None)]
    return None


# Builtins whose result depends on their arguments only.
_PURE = frozenset({"int", "float", "str", "bool", "len", "min", "max", "abs", "round", "True", "False", "None"})


def _read_names(node: cst.CSTNode) -> Iterator[str]:
    """The names and attribute chains an expression reads (`opt.epochs * k` → opt.epochs, k),
    builtins left out."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        name = dotted(node)
        if name is not None:
            if name not in _PURE:
                yield name
            return
    if isinstance(node, cst.Call):
        for a in node.args:
            yield from _read_names(a.value)
        return
    for child in children(node):
        yield from _read_names(child)


def _prefixes(name: str) -> list[str]:
    """`opt.train.epochs` → opt, opt.train, opt.train.epochs."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


class _NotNone:
    """An object that is neither None nor a literal (an instance a constructor makes)."""

    def __repr__(self) -> str:
        return "NOT_NONE"


NOT_NONE = _NotNone()

_ORDER: dict[type, Callable[[Any, Any], bool]] = {
    cst.GreaterThan: lambda a, b: a > b, cst.GreaterThanEqual: lambda a, b: a >= b,
    cst.LessThan: lambda a, b: a < b, cst.LessThanEqual: lambda a, b: a <= b,
    cst.Equal: lambda a, b: a == b, cst.NotEqual: lambda a, b: a != b,
}
Judge = Callable[[object], "bool | None"]


def literal_test(test: cst.BaseExpression) -> tuple[cst.BaseExpression, Judge] | None:
    """A test decided by the literal values of one name: `flag`, `self.verbose`, `blur > 0`,
    `trt_file is not None`, `mode == "eval"`, `mode in ("val", "test")` — the name, and the
    test's outcome for a literal value (None when that value does not decide it)."""
    if _named(test):
        return test, _truth
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comp = test.comparisons[0]
    operator, left, other = comp.operator, test.left, comp.comparator
    if not _named(left) and _named(other) and isinstance(operator, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
        left, other = other, left  # `None is not x`, `"eval" == mode`
    if not _named(left):
        return None
    if isinstance(operator, (cst.Is, cst.IsNot)) and isinstance(other, cst.Name) and other.value == "None":
        wanted = isinstance(operator, cst.Is)
        return left, lambda node: None if (none := _noneness(node)) is None else none == wanted
    if isinstance(operator, (cst.In, cst.NotIn)) and isinstance(other, (cst.Tuple, cst.List, cst.Set)):
        options = [_constant(e.value) for e in other.elements]
        if not options or any(o is None for o in options):
            return None
        inside = isinstance(operator, cst.In)
        return left, lambda node: None if (value := _constant(node)) is None else ((value in options) == inside)
    bound = _constant(other)
    compare = _ORDER.get(type(operator))
    if bound is None or compare is None:
        return None
    if isinstance(bound, str) and not isinstance(operator, (cst.Equal, cst.NotEqual)):
        return None

    def judge(node: object) -> bool | None:
        value = _constant(node)
        if value is None or isinstance(value, str) != isinstance(bound, str):
            return None
        return compare(value, bound)
    return left, judge


_LITERAL_TYPES = frozenset({"str", "int", "float", "bool", "dict", "list", "tuple"})
_DISPLAYS: tuple[tuple[type[cst.CSTNode], str], ...] = (
    (cst.Integer, "int"), (cst.Float, "float"), (cst.Dict, "dict"), (cst.DictComp, "dict"),
    (cst.List, "list"), (cst.ListComp, "list"), (cst.Tuple, "tuple"))


def _literal_type(node: object) -> str | None:
    """The builtin type a literal leaf has (`str` for text built from a string literal), None
    if not known."""
    if isinstance(node, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return "str"
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Multiply, cst.Modulo)):
        sides = (_literal_type(node.left), _literal_type(node.right))
        return "str" if "str" in sides else None
    if isinstance(node, Augmented) and isinstance(node.node.operator, cst.AddAssign):
        return "str" if _literal_type(node.node.value) == "str" else None  # `msg += f"..."`
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return "bool"
    for kind, name in _DISPLAYS:
        if isinstance(node, kind):
            return name
    return None


def _none_test_of_a_local(test: cst.BaseExpression) -> bool:
    """`name is None` / `name is not None` of a plain name, or the name alone (`False if sampler
    else True`: a presence test); not an attribute: a field of an object may be set anywhere."""
    if isinstance(test, cst.Name):
        return test.value not in ("True", "False", "None")
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    comp = test.comparisons[0]
    sides = (test.left, comp.comparator)
    return isinstance(comp.operator, (cst.Is, cst.IsNot)) and any(is_none(s) for s in sides) \
        and any(isinstance(s, cst.Name) and not is_none(s) for s in sides)


def _only_a_parameter(scope: Scope, name: str) -> bool:
    """`name` is a parameter of `scope`'s function that its body never rebinds."""
    bindings = scope.assignments.get(name) or []
    return bool(bindings) and all(isinstance(b, Param) for b in bindings)


def _named(expr: cst.BaseExpression) -> bool:
    """A plain name or an attribute of `self` (`verbose`, `self.verbose`)."""
    return isinstance(expr, cst.Name) or (isinstance(expr, cst.Attribute) and (dotted(expr) or "").startswith("self."))


def _noneness(node: object) -> bool | None:
    """Whether a leaf is None: True for `None`, False for another literal or an object a
    constructor makes, None when not known."""
    if node is NOT_NONE:
        return False
    if isinstance(node, cst.Name) and node.value == "None":
        return True
    return None if _truth(node) is None else False


def _constant(node: object) -> float | str | None:
    """A number or string literal's value."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _constant(node.expression)
        return -inner if isinstance(inner, float) else None
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        return text if isinstance(text, str) else None
    return None


def _truth(node: object) -> bool | None:
    """The truth of a literal (`False`, `None`, `0`, `0.0`, `""`, `[]` are false), None if not known.
    An object a constructor or an outside API makes is read as true: tested alone it is tested
    for presence (`shuffle=False if sampler else True`)."""
    if node is NOT_NONE:
        return True
    if isinstance(node, cst.Name):
        return {"True": True, "False": False, "None": False}.get(node.value)
    if isinstance(node, (cst.Integer, cst.Float)):
        return node.evaluated_value != 0
    if isinstance(node, cst.SimpleString):
        return bool(node.evaluated_value)
    if isinstance(node, (cst.List, cst.Tuple, cst.Dict)) and not node.elements:
        return False
    return None


def _tested_name(test: cst.BaseExpression) -> str | None:
    """The name a wrapped-model test examines: `m` in `isinstance(m, DDP)`, `hasattr(m, "module")`,
    `type(m) is DDP`, `not ...`."""
    if isinstance(test, cst.UnaryOperation):
        return _tested_name(test.expression)
    if isinstance(test, cst.Comparison):
        test = test.left
    if isinstance(test, cst.Call) and test.args and isinstance(test.args[0].value, cst.Name):
        return test.args[0].value.value
    return None


# Decorators that bind a function's parameters from configuration files (gin's
# `@gin.configurable`, detectron2's `@configurable`): its defaults are fallbacks the config overrides.
_CONFIG_BINDERS = frozenset({"configurable", "external_configurable"})


def _config_bound(module: ModuleModel, function: str) -> bool:
    for expr in module.decorators.get(function, ()):
        target = expr.func if isinstance(expr, cst.Call) else expr
        name = dotted(target)
        if name is not None and name.rsplit(".", 1)[-1] in _CONFIG_BINDERS:
            return True
    return False


_IMPURE = (cst.Call, cst.Await, cst.Yield, cst.NamedExpr, cst.Lambda, cst.ListComp, cst.SetComp,
           cst.DictComp, cst.GeneratorExp)


def _guard_key(value: Value, guard: Guard) -> object:
    """What identifies the test of `guard` when leaves are matched against each other: the
    `if` itself, or — for a test that only reads names and constants — its text in the leaf's
    scope, since people repeat one flag test to choose two values that go together
    (`sampler = S(ds) if n > 1 else None` then `shuffle=False if n > 1 else True`)."""
    test = guard.test
    if any(isinstance(n, _IMPURE) for n in subexpressions(test)):
        return id(guard.node)
    return (id(value.module), id(value.scope), _test_text(value.module, test))


def _held_parts(value: Value, test: cst.BaseExpression, negated: bool, key: object) -> Iterator[tuple[object, bool]]:
    """(key, negated) for a test held `negated` and for the parts of it that then hold as well:
    the operands of an `and` held true, of an `or` held false, the operand of a `not` (a part
    that calls something is keyed by its node: read again, it may differ)."""
    yield key, negated
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        yield from _held_parts(value, test.expression, not negated, _part_key(value, test.expression))
        return
    if not isinstance(test, cst.BooleanOperation) or isinstance(test.operator, cst.And) == negated:
        return
    for part in (test.left, test.right):
        yield from _held_parts(value, part, negated, _part_key(value, part))


def _part_key(value: Value, part: cst.BaseExpression) -> object:
    if any(isinstance(n, _IMPURE) for n in subexpressions(part)):
        return id(part)
    return (id(value.module), id(value.scope), _test_text(value.module, part))


def _plain_test(test: cst.BaseExpression) -> bool:
    """A test of names, attributes and literals only (`WITH_DDP and SIZE > 1`): written the same
    way twice, it reads the same values (no call made again, no item looked up again)."""
    return not any(isinstance(node, (*_IMPURE, cst.Subscript)) for node in subexpressions(test))


# A point after everything a function does, outside its loops and branches.
_END = Point(1 << 60)


def _replaced_by_base_init(module: ModuleModel, binding: Shared) -> bool:
    """`self.x = ...` in a constructor that may call the base's `__init__` after it (or at a
    point not known): the base's own assignment may replace it."""
    own = binding.point
    for call in module.calls_in(binding.scope.qualname):
        func = call.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "__init__":
            if own is None or call.point is None or call.point.tick > own.tick:
                return True
    return False


def _left_by_methods(name: str, bindings: list[tuple[Binding, Point | None]],
                     memo: dict[tuple[int, str], set[int]]) -> list[tuple[Binding, Point | None]]:
    """The bindings of the attribute `name` (`self.model`) a method leaves when it returns:
    `self.model = DDP(self.model)` then `self.model = self.model.module` in `__init__` leaves the
    inner model for the other methods to read, not the wrapper (what the method itself reads
    between the two is read in its own scope)."""
    if len(bindings) < 2:
        return bindings
    kept = []
    for binding, point in bindings:
        if isinstance(binding, Shared) and binding.scope.kind == "function":
            method = binding.scope
            left = memo.get((id(method), name))
            if left is None:
                left = memo[(id(method), name)] = {id(b) for b in method.reaching(name, _END)}
            if id(binding.value) not in left:
                continue
            # (Set again later in the same block — the same branch of the same `if`s — the value
            # is replaced before the method returns.)
            own = binding.point
            if own is not None and any(
                    other is not None and other.tick > own.tick and other.guards == own.guards
                    and other.loops == own.loops for other in method.points.get(name, [])):
                continue
        kept.append((binding, point))
    return kept or bindings


def _test_text(module: ModuleModel, test: cst.BaseExpression) -> str:
    """A test's code with its spacing made plain (`n > 1` however it is wrapped), generated
    once per test."""
    texts = module.memo.setdefault("test_text", {})
    found = texts.get(id(test))
    if found is None:
        found = texts[id(test)] = " ".join(module.code(test).split())
    return str(found)


def _spawn_position(function: Function, param: Param) -> bool:
    """`param` is the first parameter a worker takes (after `self` of a method): the process
    index `mp.spawn` passes."""
    return param.index == (1 if function.owner is not None and not function.is_static else 0)
