"""The one traversal of a module: fills its ModuleModel (scopes, bindings, calls with their loops,
guards and with-blocks, functions, classes, returns) and, for the linted file, calls the rules'
visit/leave hooks through a dispatch table on the way.

Cost model (see bench/): libcst's parse is the floor; this walk reads the tree once with a cheap
dispatch table (lint/traverse.py) and records only what the queries need later.
"""

from __future__ import annotations

from typing import Callable, TypeVar, cast

import libcst as cst

from ddpcheck.lint import traverse
from ddpcheck.lint.model.module import (
    Augmented, CallSite, ClassInfo, Element, EnvAccess, ExitSite, ForSite, Guard, WhileSite, Item, ModuleModel, Param, Point,
    Scope, Shared, Span, UNASKED,
)
from ddpcheck.lint.model.syntax import dotted

Hook = Callable[[cst.CSTNode], None]
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


class Walker(cst.CSTVisitor):
    """Tracks scopes, loops, guards and with-blocks while it records calls and bindings."""

    def __init__(self, module: ModuleModel, visit_hooks: dict[type, list[Hook]] | None = None,
                 leave_hooks: dict[type, list[Hook]] | None = None) -> None:
        super().__init__()
        self.module = module
        self.scope = module.module_scope
        self.loops: list[cst.CSTNode] = []
        self.guards: list[Guard] = []
        self.withs: list[cst.With] = []
        self.handlers: list[Span] = []  # the `except` handlers around the walk's position
        self._saved: list[tuple[list[cst.CSTNode], list[Guard], list[cst.With]]] = []
        # Names a function declares `global`, by the function's scope: what it assigns to them
        # binds the module's names.
        self._globals: dict[int, set[str]] = {}
        self._block_marks: list[int] = []  # len(guards) when each indented block was entered
        self._written: set[int] = set()  # subscripts assigned to (`os.environ["K"] = v`)
        self._assigned_attributes: set[int] = set()  # attributes that are assignment targets
        self.tick = 0  # counts calls and bindings in traversal order (see Point)
        self.visit_hooks = visit_hooks or {}
        self.leave_hooks = leave_hooks or {}

    # libcst calls these for every node; a dict lookup is far cheaper than its getattr dispatch.
    def on_visit(self, node: cst.CSTNode) -> bool:
        t = type(node)
        own = _OWN_VISIT.get(t)
        if own is not None:
            own(self, node)
        hooks = self.visit_hooks.get(t)
        if hooks:
            for hook in hooks:
                hook(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        t = type(original_node)
        hooks = self.leave_hooks.get(t)
        if hooks:
            for hook in hooks:
                hook(original_node)
        own = _OWN_LEAVE.get(t)
        if own is not None:
            own(self, original_node)

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        own = _OWN_ATTR_VISIT.get((type(node), attribute))
        if own is not None:
            own(self, node)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        own = _OWN_ATTR_LEAVE.get((type(original_node), attribute))
        if own is not None:
            own(self)

    # --- scopes ------------------------------------------------------------------------------
    def _import(self, node: cst.Import | cst.ImportFrom) -> None:
        self.module.names.add(node)

    def _enter_function(self, node: cst.FunctionDef) -> None:
        outer = self.scope
        self.scope = Scope(node.name.value, node, outer, "function")
        qualname = self.scope.qualname
        module = self.module
        module.functions[qualname] = node
        module.function_scopes[qualname] = self.scope
        if node.decorators:
            module.decorators[qualname] = tuple(d.decorator for d in node.decorators)
        if outer.kind == "class":
            info = module.classes.get(outer.qualname)
            if info is not None:
                info.methods[node.name.value] = qualname
                if any(dotted(d.decorator) in ("property", "functools.cached_property", "cached_property")
                       for d in node.decorators):
                    info.properties.add(node.name.value)
        else:
            outer.assignments.setdefault(node.name.value, [])
        # Parameters are bound by the caller: they shadow outer names with values from call sites.
        params = node.params
        assignments = self.scope.assignments
        points = self.scope.points
        for index, param in enumerate((*params.posonly_params, *params.params)):
            assignments[param.name.value] = [Param(qualname, param.name.value, index, param.default, "",
                                                   param.annotation.annotation if param.annotation else None)]
            points[param.name.value] = [Point(-1)]
        for param in params.kwonly_params:
            assignments[param.name.value] = [Param(qualname, param.name.value, None, param.default, "",
                                                   param.annotation.annotation if param.annotation else None)]
            points[param.name.value] = [Point(-1)]
        for star, mark in ((params.star_arg, "*"), (params.star_kwarg, "**")):
            if isinstance(star, cst.Param):
                assignments[star.name.value] = [Param(qualname, star.name.value, None, None, mark)]
                points[star.name.value] = [Point(-1)]
        self._enter_body()

    def _enter_class(self, node: cst.ClassDef) -> None:
        outer = self.scope
        self.scope = Scope(node.name.value, node, outer, "class")
        self.module.classes[self.scope.qualname] = ClassInfo(
            self.scope.qualname, node, tuple(b.value for b in node.bases), self.scope
        )
        outer.assignments.setdefault(node.name.value, [])
        self._enter_body()

    def _enter_body(self) -> None:
        # Code in a body runs when called, not under the loops/ifs around the def.
        self._saved.append((self.loops, self.guards, self.withs))
        self.loops, self.guards, self.withs = [], [], []

    def _leave_scope(self, node: cst.CSTNode) -> None:
        assert self.scope.parent is not None
        self.scope = self.scope.parent
        self.loops, self.guards, self.withs = self._saved.pop()

    # --- calls and bindings ------------------------------------------------------------------
    def _call(self, node: cst.Call) -> None:
        module = self.module
        func = node.func
        self.tick += 1
        module.calls.append(CallSite(
            node,
            module.names.resolve(func),
            dotted(func),
            self.scope,
            tuple(self.loops),
            tuple(self.guards),
            tuple(self.withs),
            module,
            len(module.calls),
            self.tick,
            None,
            func.attr.value if isinstance(func, cst.Attribute) else None,
            UNASKED,
        ))
        # `kw.update({...})` / `kw.update(k=v)`: entries a `**kw` later passes on.
        if isinstance(func, cst.Attribute) and func.attr.value == "update":
            name = dotted(func.value)
            if name is not None:
                entries = self.scope.updates.setdefault(name, [])
                guards = tuple(self.guards)
                point = Point(self.tick, tuple(self.loops), guards)
                for a in node.args:
                    if a.keyword is not None:
                        entries.append((a.keyword.value, a.value, guards, point))
                    elif not a.star:
                        entries.append((None, a.value, guards, point))

    def _exit(self, node: cst.Break | cst.Continue) -> None:
        self.module.exits.append(ExitSite(node, self.scope, tuple(self.loops), tuple(self.guards)))

    def _yield(self, node: cst.Yield) -> None:
        function = self.scope.function
        if function is not None:
            self.module.generators.add(function.qualname)
            if isinstance(node.value, cst.BaseExpression):  # (not `yield from`, nor a bare `yield`)
                self.module.yields.setdefault(function.qualname, []).append(node.value)

    def _return(self, node: cst.Return) -> None:
        self.module.exits.append(ExitSite(node, self.scope, tuple(self.loops), tuple(self.guards)))
        if node.value is not None:
            function = self.scope.function
            if function is not None:
                self.module.returns.setdefault(function.qualname, []).append(node.value)
                self.tick += 1
                self.module.return_points[id(node.value)] = Point(self.tick, tuple(self.loops), tuple(self.guards))

    def _mark_written(self, node: cst.Assign) -> None:
        # Targets are visited before the value is bound (bindings are made on leave, after the
        # value's calls): mark written subscripts and attributes now, for _subscript and
        # _attribute.
        for target in node.targets:
            if isinstance(target.target, cst.Subscript):
                self._written.add(id(target.target))
            self._mark_target(target.target)

    def _mark_target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Attribute):
            self._assigned_attributes.add(id(target))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._mark_target(element.value)

    def _mark_other_target(self, node: cst.AnnAssign | cst.AugAssign) -> None:
        self._mark_target(node.target)

    def _attribute(self, node: cst.Attribute) -> None:
        """`self.x` read in a function body (assignment targets are writes, not reads)."""
        base = node.value
        if type(base) is cst.Name and base.value == "self" and id(node) not in self._assigned_attributes:
            scope = self.scope
            if scope.kind == "function":
                reads = self.module.self_reads.setdefault(scope.qualname, {})
                reads.setdefault(node.attr.value, []).append(node)

    def _assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def _ann_assign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)

    def _aug_assign(self, node: cst.AugAssign) -> None:
        name = dotted(node.target)
        if name is not None:
            self._record(name, Augmented(node))

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | Item | Element) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for index, element in enumerate(target.elements):
                if isinstance(element, cst.StarredElement):
                    self._bind(element.value, Element(value) if not isinstance(value, (Item, Element)) else
                               Element(value.iterable, index=-1) if isinstance(value, Element) and not value.via_with
                               else value)
                    continue
                if isinstance(value, cst.BaseExpression):
                    inner: cst.BaseExpression | Item | Element = Item(value, index)
                elif isinstance(value, Element) and not value.via_with:
                    # Element `index` of each item; a nested target's names (-1) are not followed.
                    known = value.index is None and not any(
                        isinstance(e, cst.StarredElement) for e in target.elements[:index])
                    inner = Element(value.iterable, index=index if known else -1)
                else:
                    inner = value
                self._bind(element.value, inner)
            # `train_loader, val_loader = DataLoader(a), DataLoader(b)`: each call is assigned
            # to its own name, as if written on two lines (rules read a call's name).
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements) \
                    and not any(isinstance(e, cst.StarredElement) for e in (*value.elements, *target.elements)):
                for element, item in zip(target.elements, value.elements):
                    name = dotted(element.value)
                    if name is not None:
                        self.module.targets.setdefault(id(item.value), []).append(name)
            return
        if isinstance(target, cst.Subscript) and isinstance(value, cst.BaseExpression):
            self._written.add(id(target))
            name = dotted(target.value)
            if name is not None and len(target.slice) == 1:
                key = target.slice[0].slice
                text = key.value.evaluated_value if (
                    isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString)) else None
                self.tick += 1
                self.scope.updates.setdefault(name, []).append(
                    (text if isinstance(text, str) else "", value, tuple(self.guards),
                     Point(self.tick, tuple(self.loops), tuple(self.guards))))
            return
        name = dotted(target)
        if name is not None:
            self._record(name, value)
            if isinstance(value, cst.BaseExpression):
                self.module.targets.setdefault(id(value), []).append(name)

    def _global(self, node: cst.Global) -> None:
        if self.scope.kind == "function":
            self._globals.setdefault(id(self.scope), set()).update(n.name.value for n in node.names)

    def _record(self, name: str, value: cst.BaseExpression | Item | Element | Augmented) -> None:
        scope = self.scope
        self.tick += 1
        point = Point(self.tick, tuple(self.loops), tuple(self.guards), self.handlers[-1] if self.handlers else None)
        if name in self._globals.get(id(scope), ()):
            # `global is_distributed` then `is_distributed = True` in `init()`: a binding of the
            # module's name, made when the function runs (any time, as seen from other code);
            # its value's own names are the function's. The function keeps its own list too, so
            # its own reads still follow the order of its statements.
            module_scope = self.module.module_scope
            module_scope.assignments.setdefault(name, []).append(Shared(value, scope, point))
            module_scope.points.setdefault(name, []).append(None)
        scope.assignments.setdefault(name, []).append(value)
        scope.points.setdefault(name, []).append(point)
        if name.startswith("self."):
            owner = scope.class_scope
            if owner is not None and owner is not scope:
                # An attribute of `self` is shared by every method: `self.model = DDP(...)` in
                # __init__ is what `self.model(x)` calls in train(). The method keeps its own
                # list too, so lookups inside it still see its own assignments first.
                owner.assignments.setdefault(name, []).append(Shared(value, scope, point))
                owner.points.setdefault(name, []).append(None)

    def _for(self, node: cst.For) -> None:
        self.module.fors.append(ForSite(node, self.scope, tuple(self.loops), tuple(self.guards), self.tick + 1,
                                        tuple(self.withs)))

    def _while(self, node: cst.While) -> None:
        self.module.whiles.append(WhileSite(node, self.scope, tuple(self.loops), tuple(self.guards), self.tick + 1,
                                          tuple(self.withs)))

    def _for_body(self, node: cst.For) -> None:
        # The target is bound after the iterable is evaluated, inside the loop.
        self.loops.append(node)
        self._bind(node.target, Element(node.iter))

    def _with(self, node: cst.With) -> None:
        self.module.withs.append(node)
        for item in node.items:
            if item.asname is not None:
                self._bind(item.asname.name, Element(item.item, via_with=True))

    # --- blocks and guards -------------------------------------------------------------------
    def _enter_block(self, node: cst.CSTNode) -> None:
        self._block_marks.append(len(self.guards))

    def _leave_block(self, node: cst.CSTNode) -> None:
        # Early-exit guards (see _early_exit) last until the end of the block that holds them.
        del self.guards[self._block_marks.pop():]

    def _subscript(self, node: cst.Subscript) -> None:
        base = node.value
        named = base.attr.value if isinstance(base, cst.Attribute) else base.value if isinstance(base, cst.Name) else ""
        if named == "environ" and len(node.slice) == 1:
            key = node.slice[0].slice
            if isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString):
                text = key.value.evaluated_value
                if isinstance(text, str):
                    self.module.env.append(EnvAccess(text, node, self.scope, tuple(self.guards), id(node) in self._written))

    def _visit_if(self, node: cst.If) -> None:
        self.module.ifs.append((node, self.scope))
        self.module.if_ticks[id(node)] = self.tick
        if self.scope.parent is None and not self.guards and _is_main_test(node.test):
            self.module.main_guards.append(node)

    def _early_exit(self, node: cst.If) -> None:
        """`if rank != 0: return` (no else): the statements after it in the same block run only
        where the test is false, as if they sat in its else branch."""
        if node.orelse is None and _exits(node.body):
            self.guards.append(Guard(node.test, True, node))

    def _push_loop(self, node: cst.CSTNode) -> None:
        self.loops.append(node)

    def _pop_loop(self) -> None:
        self.loops.pop()

    def _push_if_body(self, node: cst.If | cst.IfExp) -> None:
        self.guards.append(Guard(node.test, False, node))

    def _push_if_else(self, node: cst.If | cst.IfExp) -> None:
        self.guards.append(Guard(node.test, True, node))

    def _pop_guard(self) -> None:
        self.guards.pop()

    def _enter_handler(self, node: cst.CSTNode) -> None:
        self.handlers.append(Span())

    def _leave_handler(self, node: cst.CSTNode) -> None:
        # Every point inside the handler has a smaller tick than its end; every point after, not.
        self.tick += 1
        self.handlers.pop().end = self.tick

    def _push_with(self, node: cst.With) -> None:
        self.withs.append(node)

    def _pop_with(self) -> None:
        self.withs.pop()


def _is_main_test(test: cst.BaseExpression) -> bool:
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    sides = (test.left, test.comparisons[0].comparator)
    return isinstance(test.comparisons[0].operator, cst.Equal) and any(
        isinstance(s, cst.Name) and s.value == "__name__" for s in sides
    ) and any(isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__" for s in sides)


def _exits(body: cst.BaseSuite) -> bool:
    """Whether a block always leaves its function/loop iteration: ends in return/raise/continue/
    break or a call of sys.exit()/exit()/os._exit()."""
    statements = body.body
    if not statements:
        return False
    last = statements[-1]
    if isinstance(body, cst.SimpleStatementSuite):
        small = last
    elif isinstance(last, cst.SimpleStatementLine) and last.body:
        small = last.body[-1]
    else:
        return False
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return dotted(small.value.func) in _EXITS
    return isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break))


# The dispatch tables are keyed by type(node), so each method gets nodes of the type it names;
# _own checks that pairing once, where the table is built.
_Own = Callable[[Walker, cst.CSTNode], None]
_Node = TypeVar("_Node", bound=cst.CSTNode)


def _own(node_type: type[_Node], method: Callable[[Walker, _Node], None]) -> tuple[type[cst.CSTNode], _Own]:
    return node_type, cast(_Own, method)


def _own_attr(node_type: type[_Node], attribute: str,
              method: Callable[[Walker, _Node], None]) -> tuple[tuple[type[cst.CSTNode], str], _Own]:
    return (node_type, attribute), cast(_Own, method)


_OWN_VISIT: dict[type[cst.CSTNode], _Own] = dict([
    _own(cst.Import, Walker._import),
    _own(cst.Global, Walker._global),
    _own(cst.ImportFrom, Walker._import),
    _own(cst.FunctionDef, Walker._enter_function),
    _own(cst.ClassDef, Walker._enter_class),
    _own(cst.Call, Walker._call),
    _own(cst.Return, Walker._return),
    _own(cst.Yield, Walker._yield),
    _own(cst.Break, Walker._exit),
    _own(cst.Continue, Walker._exit),
    _own(cst.Attribute, Walker._attribute),
    _own(cst.Assign, Walker._mark_written),
    _own(cst.AnnAssign, Walker._mark_other_target),
    _own(cst.AugAssign, Walker._mark_other_target),
    _own(cst.For, Walker._for),
    _own(cst.While, Walker._while),
    _own(cst.With, Walker._with),
    _own(cst.If, Walker._visit_if),
    _own(cst.Subscript, Walker._subscript),
    _own(cst.IndentedBlock, Walker._enter_block),
    _own(cst.Module, Walker._enter_block),
    _own(cst.ExceptHandler, Walker._enter_handler),
    _own(cst.ExceptStarHandler, Walker._enter_handler),
])
_OWN_LEAVE: dict[type[cst.CSTNode], _Own] = dict([
    _own(cst.Assign, Walker._assign),
    _own(cst.AnnAssign, Walker._ann_assign),
    _own(cst.AugAssign, Walker._aug_assign),
    _own(cst.FunctionDef, Walker._leave_scope),
    _own(cst.ClassDef, Walker._leave_scope),
    _own(cst.IndentedBlock, Walker._leave_block),
    _own(cst.Module, Walker._leave_block),
    _own(cst.If, Walker._early_exit),
    _own(cst.ExceptHandler, Walker._leave_handler),
    _own(cst.ExceptStarHandler, Walker._leave_handler),
])
_OWN_ATTR_VISIT: dict[tuple[type[cst.CSTNode], str], _Own] = dict([
    _own_attr(cst.For, "body", Walker._for_body),
    _own_attr(cst.While, "body", Walker._push_loop),
    _own_attr(cst.If, "body", Walker._push_if_body),
    _own_attr(cst.If, "orelse", Walker._push_if_else),
    _own_attr(cst.IfExp, "body", Walker._push_if_body),
    _own_attr(cst.IfExp, "orelse", Walker._push_if_else),
    _own_attr(cst.With, "body", Walker._push_with),
])
_OWN_ATTR_LEAVE: dict[tuple[type[cst.CSTNode], str], Callable[[Walker], None]] = {
    (cst.For, "body"): Walker._pop_loop,
    (cst.While, "body"): Walker._pop_loop,
    (cst.If, "body"): Walker._pop_guard,
    (cst.If, "orelse"): Walker._pop_guard,
    (cst.IfExp, "body"): Walker._pop_guard,
    (cst.IfExp, "orelse"): Walker._pop_guard,
    (cst.With, "body"): Walker._pop_with,
}


_ATTRIBUTES = frozenset(_OWN_ATTR_VISIT) | frozenset(_OWN_ATTR_LEAVE)


def walk(module: ModuleModel, visit_hooks: dict[type, list[Hook]] | None = None,
         leave_hooks: dict[type, list[Hook]] | None = None) -> None:
    """Fill `module`'s model from its tree in one traversal, running the hooks on the way. Token
    nodes (whitespace, punctuation, operators) are not entered unless a hook asks for one."""
    hooked = set(visit_hooks or ()) | set(leave_hooks or ())
    skip = traverse.TOKEN_NODES - hooked
    if cst.Comment in hooked:
        skip -= traverse.COMMENT_HOLDERS
    _traverse(module.tree, Walker(module, visit_hooks, leave_hooks), frozenset(skip))


# A node type's part in the walk: the Walker's own visit, the rules' visit hooks, per visited
# field (name, the Walker's attribute visit, its attribute leave, whether it is skipped when
# None), the rules' leave hooks, the Walker's own leave.
_Plan = tuple[_Own | None, list[Hook] | None,
              tuple[tuple[str, _Own | None, Callable[[Walker], None] | None, bool], ...],
              list[Hook] | None, _Own | None]


def _traverse(tree: cst.Module, walker: Walker, skip: frozenset[type]) -> None:
    """The calls `traverse.visit_selected(tree, walker, _ATTRIBUTES, skip)` makes, in the same
    order, with the Walker's dispatch (its on_visit/on_leave and attribute methods) resolved once
    per node type: most nodes have no handler and no hook, and then cost no call but the walk's
    own. libcst's own visit would rebuild every node; this one reads them."""
    visit_hooks = walker.visit_hooks
    leave_hooks = walker.leave_hooks
    plans: dict[type, _Plan] = {}
    sentinel = cst.MaybeSentinel
    # A field whose nodes are all skipped is not read at all (a seventh of the walk): token
    # fields when no token node is entered, punctuation when only comments (and what holds
    # them) are.
    if traverse.TOKEN_NODES <= skip:
        unread: Callable[[str], bool] = traverse.token_field
    elif traverse.TOKEN_NODES - traverse.COMMENT_HOLDERS <= skip:
        unread = traverse.PUNCTUATION_FIELDS.__contains__
    else:
        unread = _never

    def plan_of(kind: type, node: cst.CSTNode) -> _Plan:
        fields = tuple((a, _OWN_ATTR_VISIT.get((kind, a)), _OWN_ATTR_LEAVE.get((kind, a)),
                        a in traverse.ONLY_WHEN_SET) for a in traverse.attributes_of(node)
                       if (kind, a) in _ATTRIBUTES or not unread(a))
        plan = (_OWN_VISIT.get(kind), visit_hooks.get(kind) or None, fields, leave_hooks.get(kind) or None,
                _OWN_LEAVE.get(kind))
        plans[kind] = plan
        return plan

    def walk(node: cst.CSTNode) -> None:
        kind = type(node)
        plan = plans.get(kind)
        own_visit, visits, fields, leaves, own_leave = plan if plan is not None else plan_of(kind, node)
        if own_visit is not None:
            own_visit(walker, node)
        if visits is not None:
            for hook in visits:
                hook(node)
        for attribute, enter, leave, when_set in fields:
            value = getattr(node, attribute)
            if when_set and value is None:
                continue
            if enter is not None:
                enter(walker, node)
            vkind = type(value)
            if vkind is tuple or vkind is list:
                for child in value:
                    if type(child) not in skip:
                        walk(child)
            elif value is not None and vkind is not sentinel and vkind not in skip:
                walk(value)
            if leave is not None:
                leave(walker)
        if leaves is not None:
            for hook in leaves:
                hook(node)
        if own_leave is not None:
            own_leave(walker, node)

    walk(tree)


def _never(name: str) -> bool:
    return False


def build(path: str, source: str, tree: cst.Module, visit_hooks: dict[type, list[Hook]] | None = None,
          leave_hooks: dict[type, list[Hook]] | None = None) -> ModuleModel:
    """The model of one module, from its parsed tree, in one traversal."""
    module = ModuleModel(path, source, tree)
    walk(module, visit_hooks, leave_hooks)
    return module
