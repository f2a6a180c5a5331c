from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.conditions import exclusive_arms
from ddpcheck.lint.model.ddp import is_ddp, strip_moves, wraps
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import dotted, is_false, is_true, last_name, subexpressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._classes import (
    class_closure,
    classes_of,
    dynamic_members,
    parameter_submodules,
    self_references,
)

if TYPE_CHECKING:
    from ddpcheck.lint.model.module import CallSite, ClassInfo, ForSite, ModuleModel
    from ddpcheck.lint.model.values import Value


class UnusedSubmoduleWithoutFindUnused(Rule):
    """A layer of the DDP model is never used, and DDP is built without `find_unused_parameters=True`: the second iteration raises.

    DDP's reducer waits, in every backward, for a gradient of every parameter that requires one.
    A layer built in `__init__` and never called gets none, so the reduction of the first
    iteration never finishes.

    ## Why it matters
    The job crashes on every rank at the start of the second iteration with `RuntimeError:
    Expected to have finished reduction in the prior iteration before starting a new one. This
    error indicates that your module has parameters that were not used in producing loss`
    (measured with torch 2.13, gloo, 2 ranks). Typical causes: a head kept for another task, an
    auxiliary classifier used only in `eval`, a layer left over from a refactoring.

    Reported at the layer's construction when the class DDP wraps (or a class it builds) assigns
    a layer that owns parameters (`nn.Linear`, `nn.Conv2d`, `nn.Embedding`, `nn.LayerNorm`, ...,
    or `nn.Parameter`) to `self.x` and no method of the class ever reads `self.x` — or reads it
    only where `forward` computes a branch whose values never reach what it returns (`side =
    self.side_linear(c)`, with `side` read by nothing but other such assignments; a value read
    by a condition, a call made for its effect or an assignment to an attribute counts as
    used) —; DDP is built
    without `find_unused_parameters=True` and without `static_graph=True`. Classes that reach
    their members dynamically (`getattr(self, ...)`, `self.children()`, `self.parameters()`) and
    files that change `requires_grad` are not judged for that. Also reported in the file that
    wraps the model: a loop over the DDP model's parameters after the wrap that sets
    `requires_grad = False` for some of them (`for n, p in model.named_parameters():` with
    `p.requires_grad = False` outside the head): DDP built its list of parameters that need a
    gradient when it was constructed, and waits for those too (when a training step follows;
    freezing everything for a final evaluation waits for nothing, and so does a loop that freezes
    every parameter of the DDP model itself, `for p in teacher.parameters(): p.requires_grad =
    False` with no condition: no parameter of it gets a gradient, so its reducer waits for none).
    Also reported at the call of a project class's method that freezes part of the DDP model
    the instance holds (`for p in self.model.module.evm_net.parameters(): p.requires_grad =
    False`, `self.model` a DDP wrapper built without either flag) when a backward follows the
    call in its function or its loop (`solver.freeze_evm_net()` at epoch 0, then the training
    step).

    ## How to fix
    Delete the layer, or freeze it (`self.x.requires_grad_(False)`), or pass
    `find_unused_parameters=True` (it costs a traversal of the autograd graph every iteration),
    or `static_graph=True` when the set of unused parameters never changes.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
      (`find_unused_parameters`, `static_graph`)
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP026"
    name = "unused-submodule-without-find-unused"
    severity = Severity.ERROR
    MESSAGE = (
        "`self.{attr}` of `{cls}` is never used, so its parameters get no gradient and DDP (without "
        "`find_unused_parameters=True`) fails at the second iteration; remove the layer, freeze it, "
        "or pass `find_unused_parameters=True`"
    )

    DEAD_MESSAGE = (
        "`self.{attr}` of `{cls}` is called in `forward`, but what it computes never reaches what "
        "`forward` returns, so its parameters get no gradient and DDP (without "
        "`find_unused_parameters=True`) fails at the second iteration; use its output, remove the "
        "layer, or pass `find_unused_parameters=True`"
    )

    VALID = [
        """
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Classifier(nn.Module):
            def __init__(self, dim, classes):
                super().__init__()
                self.backbone = nn.Linear(dim, dim)
                self.head = nn.Linear(dim, classes)
                self.act = nn.ReLU()

            def forward(self, x):
                return self.head(self.act(self.backbone(x)))

        model = DDP(Classifier(512, 10).cuda(), device_ids=[local_rank])
        """,
        """
        # The auxiliary head is used in eval only, and DDP is told so.
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
                self.aux = nn.Linear(8, 2)

            def forward(self, x):
                return self.body(x)

        model = DDP(Net(), find_unused_parameters=True)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Encoder(nn.Module):
                def __init__(self, vocab, dim):
                    super().__init__()
                    self.embed = nn.Embedding(vocab, dim)
                    self.proj = nn.Linear(dim, dim)
                    self.pooler = nn.Linear(dim, dim)  # from the pretraining recipe

                def forward(self, tokens):
                    return self.proj(self.embed(tokens)).mean(1)

            model = DDP(Encoder(30522, 768).to(local_rank), device_ids=[local_rank])
            """,
            lines=(10,),
        ),
    ]

    FROZEN_MESSAGE = (
        "parameters of the DDP model are frozen after the wrap: DDP registered them as trainable "
        "when it was built, waits for their gradients and fails at the second iteration; freeze "
        "them before wrapping the model"
    )

    def finish(self) -> None:
        model = self.model
        self._frozen_by_method()
        if "requires_grad" in model.root.source:
            self._frozen_after_wrap()
            return
        reported: set[int] = set()
        for wrap in wraps(model, model.root):
            site = wrap.site
            if is_true(site.arg("find_unused_parameters")) or is_true(site.arg("static_graph")) or wrap.inner is None:
                continue
            if site.has_star_kwargs:
                continue
            for module, info in class_closure(model, classes_of(model, model.values.at_call(site, wrap.inner))):
                if dynamic_members(module, info) or "requires_grad" in module.source:
                    continue
                for attr, node in parameter_submodules(model, module, info):
                    if id(node) in reported or self._read_anywhere(module, info, attr):
                        continue
                    reported.add(id(node))
                    message = self.DEAD_MESSAGE if self_references(module, info, attr) else self.MESSAGE
                    self.report(node, message.format(attr=attr, cls=info.qualname), module=module)

    @staticmethod
    def _read_anywhere(module: ModuleModel, info: ClassInfo, attr: str) -> bool:
        """`self.attr` is read in a method of the class or of a project subclass in the module
        (other than where `forward` computes a value from it that never reaches what it returns:
        `side = self.side_linear(c)` and `side` read by nothing but other such values)."""
        references = self_references(module, info, attr)
        if references and not _dead_in_forward(module, info, [node for _, node in references]):
            return True
        name = info.qualname.rsplit(".", 1)[-1]
        for other in module.classes.values():
            if other is not info and any(last_name(b) == name for b in other.bases):
                if self_references(module, other, attr):
                    return True
        return False

    def _frozen_after_wrap(self) -> None:
        """`model = DDP(model)`, then `for name, p in model.named_parameters(): p.requires_grad =
        False` (for some of them): DDP took its list of parameters that need a gradient when it
        was built; a parameter frozen later gets none, and the reducer keeps waiting for it."""
        model = self.model
        root = model.root
        for wrap in wraps(model, root):
            site = wrap.site
            if is_true(site.arg("find_unused_parameters")) or is_true(site.arg("static_graph")) \
                    or site.has_star_kwargs:
                continue
            watched = {n for n in (*wrap.outer[:1], wrap.inner_name) if n}
            for loop in root.fors:
                if loop.scope is not site.scope or loop.tick <= site.point.tick \
                        or exclusive_arms(site.guards, loop.guards):
                    continue
                iterable = loop.node.iter
                if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
                        and iterable.func.attr.value in ("parameters", "named_parameters")):
                    continue
                receiver = dotted(iterable.func.value)
                if receiver is None or not any(receiver == n or receiver.startswith(n + ".") for n in watched):
                    continue
                if any(_rebound(site, n, loop.tick) for n in watched):
                    continue  # another module under that name by the loop
                if receiver in watched and _freezes_every_item(loop.node):
                    # The whole model frozen (a teacher, an EMA copy): no parameter of it gets a
                    # gradient, so the reducer marks none ready and never waits for one.
                    continue
                if _freezes(loop.node) and self._trains_after(loop):
                    self.report(loop.node, self.FROZEN_MESSAGE)
                    break

    def _frozen_by_method(self) -> None:
        """A method of a project class freezes part of the DDP model it holds (`for p in
        self.model.module.evm_net.parameters(): p.requires_grad = False`, `self.model` a DDP
        wrapper built without `find_unused_parameters` or `static_graph`), and the run calls it
        and then trains (`solver.freeze_evm_net()`, then a training step): reported at that
        call."""
        model = self.model
        for module in model.paths.modules():
            if "requires_grad" not in module.source:
                continue
            for loop in module.fors:
                scope = loop.scope
                if scope.function is None or not scope.qualname.count("."):
                    continue  # (a method: `Class.freeze`)
                iterable = loop.node.iter
                if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
                        and iterable.func.attr.value in ("parameters", "named_parameters")):
                    continue
                receiver = iterable.func.value
                wrapper = _wrapper_of(receiver)
                whole = isinstance(receiver, cst.Attribute) and receiver.value is wrapper
                if wrapper is None or not _freezes(loop.node) or whole and _freezes_every_item(loop.node):
                    continue  # (the whole inner module frozen: no parameter of it waits)
                wrapped = [v for v in model.values.of(module, wrapper, scope, at=loop.point) if is_ddp(model, v)]
                if not wrapped or any(self._lets_unused(v) for v in wrapped):
                    continue
                for call, _ in model.graph.callers(Function(module, scope.qualname)):
                    if self._trains_after_call(call):
                        self.report(call.node, self.FROZEN_MESSAGE, module=call.module)
                        break

    @staticmethod
    def _lets_unused(value: Value) -> bool:
        """The DDP wrapper built at `value` tolerates parameters without gradients (or is not
        known)."""
        call = value.call
        site = value.module.call_at(call) if call is not None else None
        return site is None or site.has_star_kwargs or is_true(site.arg("find_unused_parameters")) \
            or is_true(site.arg("static_graph"))

    def _trains_after_call(self, call: CallSite) -> bool:
        """A backward follows `call` in its function (or in a function it calls), or in the
        same loop: the next iteration's step."""
        model = self.model
        for later in call.module.calls_in(call.scope.qualname):
            if later.scope is not call.scope or later is call:
                continue
            if later.point.tick <= call.point.tick and not (set(call.loops) & set(later.loops)):
                continue
            if later.method == "backward" or "backward" in model.facts.of_call(later):
                return True
        return False

    def _trains_after(self, loop: ForSite) -> bool:
        """A backward follows the loop in its function (itself or in a function it calls):
        freezing everything for a final evaluation, with no training step after it, waits for
        nothing."""
        model = self.model
        for call in model.root.calls_in(loop.scope.qualname):
            if call.scope is not loop.scope or call.point.tick <= loop.tick:
                continue
            if call.method == "backward" or "backward" in model.facts.of_call(call):
                return True
        return False


def _wrapper_of(receiver: cst.BaseExpression) -> cst.BaseExpression | None:
    """`self.model` in `self.model.module.evm_net` (or `self.model.module`): the expression the
    inner module is read from."""
    node = receiver
    while isinstance(node, cst.Attribute):
        if node.attr.value == "module":
            return node.value
        node = node.value
    return None


def _freezes(loop: cst.For) -> bool:
    """The loop's body sets `requires_grad` of what it iterates to False (`p.requires_grad =
    False`, `p.requires_grad_(False)`), for some of the items at least."""
    target = loop.target.elements[-1].value if isinstance(loop.target, cst.Tuple) else loop.target
    if not isinstance(target, cst.Name):
        return False
    name = target.value
    for node in subexpressions(loop.body):
        if isinstance(node, cst.Assign) and is_false(node.value):
            for t in node.targets:
                if isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad" \
                        and dotted(t.target.value) == name:
                    return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value == "requires_grad_" and dotted(node.func.value) == name \
                and node.args and is_false(node.args[0].value):
            return True
    return False


def _freezes_every_item(loop: cst.For) -> bool:
    """The loop's body freezes every item it iterates: `p.requires_grad = False` (or
    `p.requires_grad_(False)`) as a statement of the body itself, under no `if`, with nothing
    that leaves the iteration early."""
    target = loop.target.elements[-1].value if isinstance(loop.target, cst.Tuple) else loop.target
    if not isinstance(target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
        return False
    name = target.value
    if any(isinstance(node, (cst.Continue, cst.Break)) for node in subexpressions(loop.body)):
        return False
    for statement in loop.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and is_false(small.value) and any(
                    isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                    and dotted(t.target.value) == name for t in small.targets):
                return True
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) \
                    and isinstance(small.value.func, cst.Attribute) \
                    and small.value.func.attr.value == "requires_grad_" \
                    and dotted(small.value.func.value) == name and small.value.args \
                    and is_false(small.value.args[0].value):
                return True
    return False


def _rebound(site: CallSite, name: str, before: int) -> bool:
    """`name` gets a value other than the wrap `site` makes between the wrap and tick `before`."""
    values = site.scope.assignments.get(name, [])
    points = site.scope.points.get(name, [])
    for value, point in zip(values, points):
        if point is None or not site.point.tick < point.tick < before:
            continue
        if isinstance(value, cst.Call) and strip_moves(value) is site.node:
            continue
        return True
    return False


# Calls through which a function's body reaches its local names without naming them.
_REFLECTIVE = ("locals(", "vars(", "eval(", "exec(")


def _dead_in_forward(module: ModuleModel, info: ClassInfo, reads: list[cst.Attribute]) -> bool:
    """Every one of `reads` (the `self.x` reads of one member) is in the value of a plain
    assignment of the class's `forward` to names whose values never reach its `return`: read by
    no other statement than such assignments (`side = self.side_linear(c)`, then `side =
    self.act(side)`, and `side` read nowhere else). A name read by any other statement (a
    condition, a call made for its effect, an assignment to an attribute or an entry, a nested
    function) counts as used, wherever it stands."""
    qualname = info.methods.get("forward")
    if qualname is None or qualname not in module.functions:
        return False
    forward = Function(module, qualname).node
    if any(word in module.code(forward) for word in _REFLECTIVE):
        return False
    if not any(isinstance(node, cst.Return) and node.value is not None for node in subexpressions(forward.body)):
        return False
    assignments: list[tuple[set[str], set[str], set[int]]] = []
    live: set[str] = set()
    for statement, skip in _statements_of(forward.body):
        if isinstance(statement, cst.Assign) and all(_plain_targets(t.target) for t in statement.targets) \
                and not _writes_elsewhere(statement.value):
            targets = {n for t in statement.targets for n in _read_names(t.target)}
            inner = {id(n) for n in subexpressions(statement.value) if isinstance(n, cst.Attribute)}
            assignments.append((targets, _read_names(statement.value), inner))
        else:
            live |= _read_names(statement, skip)
    grown = True
    while grown:
        grown = False
        for targets, read, _ in assignments:
            if targets & live and not read <= live:
                live |= read
                grown = True
    dead = {i for targets, _, inner in assignments if not targets & live for i in inner}
    return all(id(node) in dead for node in reads)


def _statements_of(body: cst.CSTNode) -> list[tuple[cst.CSTNode, frozenset[int]]]:
    """The small statements of a function's body and its compound statements, in order, each
    with the ids of the blocks under it that are not its own to read (a compound statement
    stands for its header: `if test:`, `for x in xs:`); a nested function or class is one
    statement, read whole."""
    out: list[tuple[cst.CSTNode, frozenset[int]]] = []
    clauses = (cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)
    stack: list[cst.CSTNode] = [body]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.SimpleStatementLine):
            out.extend((small, frozenset()) for small in current.body)
        elif isinstance(current, (cst.FunctionDef, cst.ClassDef)):
            out.append((current, frozenset()))
        elif isinstance(current, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            stack.extend(reversed(current.body))
        elif isinstance(current, (cst.BaseCompoundStatement, *clauses)):
            blocks = [child for child in current.children
                      if isinstance(child, (cst.BaseSuite, cst.BaseCompoundStatement, *clauses))]
            out.append((current, frozenset(id(b) for b in blocks)))
            stack.extend(reversed(blocks))
    return out


def _writes_elsewhere(value: cst.BaseExpression) -> bool:
    """A value whose computation may put its result into another name: `(b := ...)`, an in-place
    method (`h.add_(...)`), an `out=` argument."""
    for node in subexpressions(value):
        if isinstance(node, cst.NamedExpr):
            return True
        if isinstance(node, cst.Call) and (
                isinstance(node.func, cst.Attribute) and node.func.attr.value.endswith("_")
                or any(a.keyword is not None and a.keyword.value == "out" for a in node.args)):
            return True
    return False


def _plain_targets(target: cst.BaseExpression) -> bool:
    """`x`, `a, b`, `(a, [b, c])`: names only."""
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(isinstance(e, cst.Element) and _plain_targets(e.value) for e in target.elements)
    return False


def _read_names(node: cst.CSTNode, skip: frozenset[int] = frozenset()) -> set[str]:
    """The names `node` mentions outside the blocks `skip` (an attribute's own name is not one:
    `self.x` reads `self`)."""
    out: set[str] = set()
    stack: list[cst.CSTNode] = [c for c in node.children if id(c) not in skip] if skip else [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            out.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
            continue
        stack.extend(current.children)
    return out
