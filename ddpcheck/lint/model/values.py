"""Bounded value flow: what an expression may hold, followed through assignments, tuple
unpacking, both arms of `a if c else b`, dict entries and `**kwargs`, parameters (to the
arguments of the call being followed, or of every known call site), returns (into call results),
`self.x` attributes set in other methods, properties, `.module` of a DDP wrapper and `.sampler` of
a DataLoader.

The answer is a list of leaves: expressions that are not followed further (a call of an API or
a project class, a literal, a parameter nobody passes, an unknown attribute). A bound hit (depth,
number of leaves, work per file) leaves the expression itself as a leaf — unknown, never a
wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence, Union

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import is_distributed_test, is_wrapped_test
from ddpcheck.lint.model.module import (
    Augmented, Binding, CallSite, Element, Guard, Item, ModuleModel, Param, Point, Scope, Shared,
)
from ddpcheck.lint.model.options import constant_flag
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import argument, dotted, int_value

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

DEPTH = 16
MAX_LEAVES = 48
MAX_CALLERS = 8
# Methods that return their receiver (a module moved or cast, a module set to train/eval mode).
_PASSTHROUGH = frozenset({
    "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval",
    "requires_grad_", "share_memory", "to_empty",
})


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

    @property
    def call(self) -> cst.Call | None:
        return self.node if isinstance(self.node, cst.Call) else None

    def __repr__(self) -> str:
        node = self.node
        text = self.module.code(node) if isinstance(node, cst.CSTNode) else repr(node)
        return f"<Value {' '.join(text.split())[:60]!r} in {self.scope.qualname}>"


class Values:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.budget = 20000  # evaluation steps per linted file; then everything is unknown

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
        return out

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
        if isinstance(node, Shared):
            yield from self._eval(module, node.value, node.scope, self._frame_for(node.scope, frame), depth - 1, seen,
                                  node.point)
        elif isinstance(node, Param):
            yield from self._param(module, node, scope, frame, depth, seen, at)
        elif isinstance(node, Item):
            for whole in self._eval(module, node.value, scope, frame, depth - 1, seen, at):
                yield from self._item(whole, node.index, depth - 1, seen)
        elif isinstance(node, Element) and node.via_with:
            # `with io.BytesIO() as f:`: what the context manager gives, taken to be itself.
            yield from self._eval(module, node.iterable, scope, frame, depth - 1, seen, at)
        elif isinstance(node, (Element, Augmented)):
            yield Value(module, node, scope, frame, at)
        elif isinstance(node, cst.IfExp):
            fixed = constant_flag(module, node.test)
            if fixed is not False:
                yield from self._arm(module, node, node.body, False, scope, frame, depth, seen, at)
            if fixed is not True:
                yield from self._arm(module, node, node.orelse, True, scope, frame, depth, seen, at)
        elif isinstance(node, cst.BooleanOperation):
            yield from self._eval(module, node.left, scope, frame, depth - 1, seen, at)
            yield from self._eval(module, node.right, scope, frame, depth - 1, seen, at)
        elif isinstance(node, (cst.Name, cst.Attribute)):
            yield from self._name(module, node, scope, frame, depth, seen, at)
        elif isinstance(node, cst.Call):
            yield from self._call(module, node, scope, frame, depth, seen, at)
        elif isinstance(node, cst.Subscript):
            yield from self._subscript(module, node, scope, frame, depth, seen, at)
        else:
            yield Value(module, node, scope, frame, at)

    def _arm(self, module: ModuleModel, node: cst.IfExp, arm: cst.BaseExpression, negated: bool, scope: Scope,
             frame: Frame | None, depth: int, seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        """One arm of `a if test else b` (see _unwrapped)."""
        values = self._eval(module, arm, scope, frame, depth - 1, seen, at)
        yield from self._unwrapped(values, module, [Guard(node.test, negated, node)])

    @staticmethod
    def _never(module: ModuleModel, guard: Guard) -> bool:
        """A guard that never holds: a flag the command line cannot change, on its other arm."""
        fixed = constant_flag(module, guard.test)
        return fixed is not None and fixed == guard.negated

    def _unwrapped(self, values: Iterable[Value], module: ModuleModel, guards: Sequence[Guard]) -> Iterator[Value]:
        """Drop the DDP wrappers that cannot be there under `guards`: where `isinstance(m, DDP)`
        (or `hasattr(m, "module")`) is false, and, where the run is not distributed
        (`else` of `if args.distributed:`), wraps made only in distributed runs."""
        resolve = self.model.resolver_for(module)
        unwrapped = single = False
        for guard in guards:
            wrapped = is_wrapped_test(guard.test, resolve)
            if wrapped is not None and wrapped == guard.negated:
                unwrapped = True
            distributed = is_distributed_test(guard.test, resolve)
            if distributed is not None and distributed == guard.negated:
                single = True
        for value in values:
            if unwrapped and self.model.api_of(value) in (api.DDP, api.DATA_PARALLEL):
                continue
            if single and self._wrapped_when_distributed(value):
                continue
            yield value

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
            return owner, [(v, p) for v, p in zip(values, points) if any(v is r for r in reaching)]
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
        if bindings:
            inner_frame = frame if owner is scope else self._frame_for(owner, frame)
            for binding, point in bindings:
                if point is not None and point.guards and any(self._never(module, g) for g in point.guards):
                    continue  # `else:` of `if args.use_ema:` where that flag is always on
                values = self._eval(module, binding, owner, inner_frame, depth - 1, seen, point)
                if point is not None and point.guards:
                    values = self._unwrapped(values, module, point.guards)
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
            if inner is not None:
                yield from self._eval(base.module, inner, base.scope, base.frame, depth - 1, seen, self._call_point(base))
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
            if param.default is not None:
                yield from self._eval(module, param.default, scope, frame, depth - 1, seen, None)
                return
            yield Value(module, param, scope, frame, at)
            return
        function = Function(module, param.function)
        found = False
        for call, bound in self.model.graph.callers(function)[:MAX_CALLERS]:
            if self.model.paths.dead(call):
                continue  # a helper module's self-test passes nothing to the run
            passed = self.model.graph.argument_for(call, function, param, bound)
            if passed is None or isinstance(passed, CallSite):
                continue
            found = True
            yield from self._eval(call.module, passed, call.scope, None, depth - 1, seen, call.point)
        if param.default is not None:
            found = True
            yield from self._eval(module, param.default, scope, None, depth - 1, seen, None)
        if not found:
            yield Value(module, param, scope, frame, at)

    def _item(self, whole: Value, index: int, depth: int, seen: set[tuple[int, int]]) -> Iterator[Value]:
        node = whole.node
        if isinstance(node, (cst.Tuple, cst.List)):
            elements = node.elements
            if index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements[: index + 1]):
                yield from self._eval(whole.module, elements[index].value, whole.scope, whole.frame, depth, seen, whole.at)
                return
        yield Value(whole.module, Item(node, index) if isinstance(node, cst.BaseExpression) else node,
                    whole.scope, whole.frame, whole.at)

    def _call(self, module: ModuleModel, node: cst.Call, scope: Scope, frame: Frame | None, depth: int,
              seen: set[tuple[int, int]], at: Point | None) -> Iterator[Value]:
        func = node.func
        site = module.call_at(node)
        here = site.point if site is not None else at
        if isinstance(func, cst.Attribute) and func.attr.value in _PASSTHROUGH and \
                sum(1 for a in node.args if a.keyword is None) <= 1:
            # `model.to(device)` is `model` (moved); `DDP(model).cuda()` is the DDP wrapper.
            yield from self._eval(module, func.value, scope, frame, depth - 1, seen, here)
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
                    yield from self._eval(callee.module, value, callee.scope, inner, depth - 1, seen,
                                          callee.module.return_points.get(id(value)))
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
            for base in self._eval(module, node.value, scope, frame, depth - 1, seen, at):
                entry = _entry(base.node, text if isinstance(text, str) else None, number)
                if entry is not None:
                    found = True
                    yield from self._eval(base.module, entry, base.scope, base.frame, depth - 1, seen, base.at)
            if found:
                return
        yield Value(module, node, scope, frame, at)

    # --- keyword arguments through dicts -------------------------------------------------------
    def at_call(self, site: CallSite, expr: cst.BaseExpression) -> list[Value]:
        """What `expr`, an argument or receiver of `site`, may hold where the call is made."""
        return self.of(site.module, expr, site.scope, at=site.point)

    def keyword(self, call: CallSite, keyword: str, position: int | None = None) -> list[Value]:
        """The values passed to `keyword` of `call`: directly, or through `**kwargs` built as a
        dict literal, `dict(...)`, `kw.update(...)` or `kw["key"] = value` (entries added under
        a condition that the call is not under do not count)."""
        direct = call.arg(keyword, position)
        if direct is not None:
            return self.at_call(call, direct)
        out: list[Value] = []
        for a in call.node.args:
            if a.star != "**":
                continue
            out += self._from_mapping(call, a.value, keyword)
        return out

    def _from_mapping(self, call: CallSite, expr: cst.BaseExpression, key: str) -> list[Value]:
        out: list[Value] = []
        arms = {(id(g.node), g.negated) for g in call.guards}
        name = dotted(expr)
        if name is not None:
            for s in call.scope.chain():
                for entry_key, value, guards in s.updates.get(name, ()):
                    if not all((id(g.node), g.negated) in arms for g in guards):
                        continue
                    if entry_key == key:
                        out += self.of(call.module, value, s, at=call.point if s is call.scope else None)
                    elif entry_key is None:  # kw.update({...}) / kw.update(other)
                        out += self._entries(call.module, value, s, key, call.point if s is call.scope else None)
        out += self._entries(call.module, expr, call.scope, key, call.point)
        return out

    def _entries(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope, key: str, at: Point | None) -> list[Value]:
        out: list[Value] = []
        for base in self.of(module, expr, scope, at=at):
            entry = _entry(base.node, key, None)
            if entry is not None:
                out += self.of(base.module, entry, base.scope, base.frame, at=base.at)
        return out


def _entry(node: Leaf, key: str | None, number: int | None) -> cst.BaseExpression | None:
    """`{"k": v}["k"]`, `dict(k=v)["k"]`, `(a, b)[1]`."""
    if key is not None and isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                if element.key.evaluated_value == key:
                    return element.value
        return None
    if key is not None and isinstance(node, cst.Call) and dotted(node.func) == "dict":
        return argument(node, key)
    if number is not None and isinstance(node, (cst.Tuple, cst.List)):
        elements = node.elements
        if 0 <= number < len(elements) and not isinstance(elements[number], cst.StarredElement):
            return elements[number].value
    return None
