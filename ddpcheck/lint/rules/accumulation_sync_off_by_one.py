from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import is_ddp, is_optimizer_step
from ddpcheck.lint.model.module import CallSite, Guard, ModuleModel, Scope
from ddpcheck.lint.model.syntax import children, dotted, int_value, subexpressions
from ddpcheck.lint.rule import Invalid, Rule


class AccumulationSyncOffByOne(Rule):
    """Gradient accumulation skips the all-reduce on the micro-batch that the optimizer steps after: ranks step on unsynchronised gradients.

    With accumulation over N micro-batches, every micro-batch but the last runs under
    `model.no_sync()` (or with `require_backward_grad_sync = False`), and the last one's backward
    all-reduces everything accumulated. When the condition that picks `no_sync` and the condition
    that picks the optimizer step disagree by one — `no_sync` when `i % N != 0` but the step when
    `(i + 1) % N == 0`, or nanoGPT's switch written `micro_step == 0` instead of
    `micro_step == N - 1` — the step follows a backward that did not synchronise.

    ## Why it matters
    Each rank then steps with its own gradients for part of the accumulated batches (all of them,
    in the worst case): the replicas drift apart silently, and rank 0's checkpoint is a model
    trained on its own shard. The loss still goes down, so nothing looks wrong.

    Reported at the optimizer step (at the switch, for nanoGPT's form) when both conditions are of the form
    `(counter [+ c]) % N == r` / `!= r` (or `micro_step == K` inside `for micro_step in range(N)`)
    over the same counter and the same N, and the step's micro-batch is one that skips
    synchronisation. Conditions of any other shape are not judged. Also reported: nanoGPT's
    switch set in the micro-step loop after that step's forward of the same DDP model (and before
    the backward): DDP reads the flag when the forward runs, so each micro-step takes the value the
    previous one set. And an optimizer step in a loop whose every backward runs inside
    `with model.no_sync():` (or a project helper returning `model.no_sync()` for a DDP model,
    passed nothing from the counter) that the step is outside of, with no collective and no
    `require_backward_grad_sync` in the loop: the last micro-batch does not synchronise either.
    And a switch set in the loop, before the DDP forward, from a test of values the loop never
    changes (`model.require_backward_grad_sync = accum_steps == 1`) while the optimizer steps
    after every backward: whenever the test is false, no step's gradients were all-reduced.

    ## How to fix
    Use one expression for both decisions, e.g.
    `last = (i + 1) % accum == 0`, then `ctx = contextlib.nullcontext() if last else model.no_sync()`
    and `if last: optimizer.step()` (nanoGPT: `model.require_backward_grad_sync = micro_step ==
    accum - 1`).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
    - https://github.com/karpathy/nanoGPT/blob/master/train.py (the require_backward_grad_sync switch)
    """

    code = "DDP031"
    name = "accumulation-sync-off-by-one"
    severity = Severity.ERROR
    MESSAGE = (
        "the optimizer steps after a micro-batch whose backward ran without synchronising "
        "(`{no_sync}` and `{step}` disagree): ranks step on their own gradients; decide both "
        "from one `is_last_micro_batch` value"
    )
    ALWAYS_MESSAGE = (
        "the optimizer steps after micro-batches that all ran under `{no_sync}`, the last one "
        "included: no backward all-reduces the gradients, so every rank steps on its own; leave "
        "the last micro-batch before the step outside `no_sync`"
    )
    INVARIANT_MESSAGE = (
        "`{switch}` is set from values the training loop never changes while `{step}` runs "
        "after every backward: whenever it is false (accumulation on) no backward all-reduces and "
        "every rank steps on its own gradients; set it to whether this micro-batch is the last "
        "before the step, and step only then"
    )
    LATE_MESSAGE = (
        "`{switch}` is set after this micro-step's forward: DDP reads the flag when the forward "
        "runs, so each micro-step uses the previous one's value and the backward before the "
        "optimizer step does not all-reduce; set it before the forward"
    )

    VALID = [
        """
        import contextlib
        for i, (x, y) in enumerate(loader):
            ctx = model.no_sync() if (i + 1) % accum != 0 else contextlib.nullcontext()
            with ctx:
                loss = criterion(model(x), y) / accum
                loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        for micro_step in range(gradient_accumulation_steps):
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            logits, loss = model(X, Y)
            loss.backward()
        optimizer.step()
        """,
        """
        for step, batch in enumerate(loader):
            if step % accum_steps != accum_steps - 1:
                with model.no_sync():
                    model(batch).loss.backward()
            else:
                model(batch).loss.backward()
            if step % accum_steps == accum_steps - 1:
                optimizer.step()
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for i, (x, y) in enumerate(loader):
                if i % accum != 0:
                    with model.no_sync():
                        loss = criterion(model(x), y) / accum
                        loss.backward()
                else:
                    loss = criterion(model(x), y) / accum
                    loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            lines=(11,),
        ),
        Invalid(
            """
            import contextlib
            def train(model, loader, optimizer, accum):
                for it, batch in enumerate(loader):
                    sync = contextlib.nullcontext() if it % accum == 0 else model.no_sync()
                    with sync:
                        loss = model(**batch).loss / accum
                        loss.backward()
                    if (it + 1) % accum == 0:
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
            """,
            lines=(9,),
        ),
        Invalid(
            """
            # nanoGPT's switch, off by one: the last micro-step does not synchronise.
            import torch
            for micro_step in range(grad_accum):
                model.require_backward_grad_sync = micro_step == 0
                with ctx:
                    logits, loss = model(X, Y)
                loss.backward()
            optimizer.step()
            """,
            lines=(4,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        for module in (model.root,):
            steps = [s for s in module.calls if s.method == "step" and s.loops and is_optimizer_step(model, s)]
            for no_sync, predicate, text in self._no_sync_predicates(module):
                for step in steps:
                    if step.scope is not no_sync.scope or step.loops[-1] is not no_sync.loops[-1]:
                        continue
                    stepping = _guard_predicate(module, step.guards, predicate.counter)
                    if stepping is None or stepping[0].counter != predicate.counter \
                            or stepping[0].modulus != predicate.modulus:
                        continue
                    if _overlap(predicate, stepping[0]):
                        self.report(step.node, self.MESSAGE.format(no_sync=text, step=stepping[1]))
            for switch, step in self._off_by_one_switches(module):
                self.report(switch, self.MESSAGE.format(no_sync=module.code(switch).strip(),
                                                        step=module.code(step.node)))
            for value, name in self._late_switches(module):
                self.report(value, self.LATE_MESSAGE.format(switch=f"{name} = {module.code(value).strip()}"))
            for value, name, step in self._invariant_switches(module):
                self.report(value, self.INVARIANT_MESSAGE.format(
                    switch=f"{name} = {' '.join(module.code(value).split())}", step=module.code(step.node)))
            for step, with_node in self._never_synced(module, steps):
                self.report(step.node, self.ALWAYS_MESSAGE.format(
                    no_sync=" ".join(module.code(with_node.items[0].item).split())))

    # --- no_sync around every micro-batch -------------------------------------------------------
    def _never_synced(self, module: ModuleModel, steps: list[CallSite]) -> Iterator[tuple[CallSite, cst.With]]:
        """An optimizer step in a loop whose every backward before it, on every pass, runs
        inside a `with` of `no_sync` (directly, or a project helper that returns `model.no_sync()`
        for a DDP model) that the step is outside of: the micro-batch the step follows did not
        synchronise either, so no gradient is ever all-reduced. Not where the loop reduces
        anything itself (gradients all-reduced by hand) or switches `require_backward_grad_sync`."""
        for step in steps:
            loop = step.loops[-1]
            inside = [c for c in module.calls if c.scope is step.scope and loop in c.loops]
            if any(api.is_collective(self.model.api(c)) for c in inside) \
                    or "require_backward_grad_sync" in module.code(loop):
                continue
            backwards = [c for c in inside if c.method == "backward" and c.tick < step.tick]
            if not backwards:
                continue
            if any(c.method != "backward" and self._backward_inside(c) for c in inside):
                continue  # a project function of the loop runs a backward the loop does not show
            found: cst.With | None = None
            for backward in backwards:
                around = next((w for w in backward.withs if _contains(loop, w) and not _contains(w, step.node)
                               and any(self._no_sync_item(module, step, i.item) for i in w.items)), None)
                if around is None:
                    found = None
                    break
                found = found or around
            if found is not None:
                yield step, found

    def _backward_inside(self, site: CallSite) -> bool:
        return any("backward" in function.module.code(function.node) for function, _ in self.model.graph.targets(site))

    def _no_sync_item(self, module: ModuleModel, step: CallSite, item: cst.BaseExpression) -> bool:
        """`model.no_sync()`, or `ctx(model)` of a project function one of whose returns is a
        `.no_sync()` call (`return model.no_sync() if isinstance(model, DDP) else nullcontext()`),
        passed only names (nothing from the micro-batch counter)."""
        if not isinstance(item, cst.Call):
            return False
        if isinstance(item.func, cst.Attribute) and item.func.attr.value == "no_sync":
            return True
        if any(not isinstance(a.value, (cst.Name, cst.Attribute)) or a.keyword is not None for a in item.args):
            return False
        site = module.call_at(item)
        if site is None:
            return False
        targets = self.model.graph.targets(site)
        return bool(targets) and all(
            any(isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute) and sub.func.attr.value == "no_sync"
                for returned in function.module.returns.get(function.qualname, ()) for sub in subexpressions(returned))
            for function, _bound in targets)

    # --- no_sync under a modular condition ------------------------------------------------------
    def _no_sync_predicates(self, module: ModuleModel) -> Iterator[tuple[CallSite, _Pred, str]]:
        """(the no_sync call, when it is used as a predicate, the condition's text)."""
        for site in module.calls:
            if site.method != "no_sync" or not site.loops:
                continue
            found = self._chosen_by(module, site)
            if found is not None:
                yield site, found[0], found[1]

    def _chosen_by(self, module: ModuleModel, site: CallSite) -> tuple[_Pred, str] | None:
        """The condition under which this no_sync() is used: the arm of `a if c else b` it is in
        (directly in the with, or through a variable), or the `if` around its with block."""
        expr = _ifexp_holding(module, site)
        if expr is not None:
            pred = _predicate(expr.test)
            if pred is None:
                return None
            in_body = _contains(expr.body, site.node)
            return (pred if in_body else pred.negate()), module.code(expr.test)
        if site.guards:
            guard = site.guards[-1]
            pred = _predicate(guard.test)
            if pred is not None:
                return (pred.negate() if guard.negated else pred), module.code(guard.test)
        return None

    # --- nanoGPT's switch ---------------------------------------------------------------------
    def _late_switches(self, module: ModuleModel) -> Iterator[tuple[cst.BaseExpression, str]]:
        """`model.require_backward_grad_sync = micro_step == N - 1` set in the micro-step loop
        after that step's forward of the same model (and before its backward): DDP reads the flag
        when the forward runs, so each micro-step uses the value the previous one set and the
        last micro-step's backward, the one the optimizer steps after, does not all-reduce."""
        for scope in [module.module_scope, *module.function_scopes.values()]:
            for name, bindings in scope.assignments.items():
                if not name.endswith(".require_backward_grad_sync"):
                    continue
                receiver = name[: -len(".require_backward_grad_sync")]
                for value, point in zip(bindings, scope.points.get(name, [])):
                    if point is None or not point.loops or not isinstance(point.loops[-1], cst.For) \
                            or not isinstance(value, cst.Comparison):
                        continue
                    loop = point.loops[-1]
                    if dotted(value.left) != dotted(loop.target) or not isinstance(loop.iter, cst.Call) \
                            or dotted(loop.iter.func) != "range":
                        continue
                    inside = [c for c in module.calls if c.scope is scope and loop in c.loops]
                    forwards = [c for c in inside if dotted(c.node.func) == receiver]
                    before = [c for c in forwards if c.tick < point.tick]
                    # The backward may follow in the micro-step or after the loop (one backward
                    # of the last micro-step's loss), in the same pass of the loops around it.
                    outer = point.loops[:-1]
                    later_backward = any(c.scope is scope and c.method == "backward" and c.tick > point.tick
                                         and c.loops[:len(outer)] == outer for c in module.calls)
                    if before and later_backward and not any(c.tick > point.tick for c in forwards) \
                            and self._wraps(module, before[0]):
                        yield value, name

    def _invariant_switches(self, module: ModuleModel) -> Iterator[tuple[cst.BaseExpression, str, CallSite]]:
        """`model.require_backward_grad_sync = <test>` set in a training loop from values the loop
        never changes (`accum_steps == 1`: no loop counter, no call), before that pass's forward of
        the same DDP model, while the optimizer step after the backward runs on every pass of the
        loop: the flag is the same on every pass, so whenever the test is false (the accumulation
        the switch was written for) every step follows a backward that did not all-reduce. A test
        the loop can change, a step under a condition in the loop, a second switch or a collective
        in the loop are not judged."""
        for scope in [module.module_scope, *module.function_scopes.values()]:
            for name, bindings in scope.assignments.items():
                if not name.endswith(".require_backward_grad_sync"):
                    continue
                receiver = name[: -len(".require_backward_grad_sync")]
                points = scope.points.get(name, [])
                for value, point in zip(bindings, points):
                    if point is None or not point.loops or not isinstance(value, cst.BaseExpression):
                        continue
                    loop = point.loops[-1]
                    if sum(1 for p in points if p is not None and loop in p.loops) != 1 \
                            or not self._loop_invariant_test(scope, value, point.loops):
                        continue
                    inside = [c for c in module.calls if c.scope is scope and loop in c.loops]
                    if any(api.is_collective(self.model.api(c)) for c in inside):
                        continue
                    forwards = [c for c in inside if dotted(c.node.func) == receiver and c.tick > point.tick]
                    if not forwards or not self._wraps(module, forwards[0]):
                        continue
                    backwards = [c for c in inside if c.method == "backward" and c.tick > forwards[0].tick]
                    if not backwards:
                        continue
                    step = next((c for c in inside if c.method == "step" and c.tick > backwards[0].tick
                                 and not any(_contains(loop, g.node) for g in c.guards)
                                 and not any(_contains(loop, w) for w in c.withs)
                                 and is_optimizer_step(self.model, c)), None)
                    if step is not None:
                        yield value, name, step

    @staticmethod
    def _loop_invariant_test(scope: Scope, value: cst.BaseExpression, loops: tuple[cst.CSTNode, ...]) -> bool:
        """A comparison (or `not`/`and`/`or` of them) of names, attributes, subscripts and
        constants, none of them bound inside the loops around the switch (their targets
        included) and no call: the same value on every pass."""
        test = _unparen(value)
        if not isinstance(test, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)):
            return False
        if any(isinstance(sub, (cst.Call, cst.Await, cst.Yield, cst.NamedExpr, cst.Lambda))
               for sub in subexpressions(test)):
            return False
        bound = {name for name, points in scope.points.items()
                 if any(p is not None and any(loop in p.loops for loop in loops) for p in points)}
        for loop in loops:
            if isinstance(loop, cst.For):
                bound.update(n.value for n in subexpressions(loop.target) if isinstance(n, cst.Name))
        reads = [r for r in _reads(test) if r not in ("True", "False", "None")]
        return bool(reads) and not any(
            read == b or read.startswith(b + ".") or b.startswith(read + ".") for read in reads for b in bound)

    def _wraps(self, module: ModuleModel, forward: CallSite) -> bool:
        values = self.model.values.at_call(forward, forward.node.func)
        return bool(values) and any(is_ddp(self.model, v) for v in values)

    def _off_by_one_switches(self, module: ModuleModel) -> Iterator[tuple[cst.Assign, CallSite]]:
        """`model.require_backward_grad_sync = micro_step == K` in `for micro_step in range(N)`
        with K not `N - 1`, and an optimizer step after that loop."""
        for site in module.fors:
            loop = site.node
            target = dotted(loop.target)
            if target is None or not (isinstance(loop.iter, cst.Call) and dotted(loop.iter.func) == "range"
                                      and len(loop.iter.args) == 1):
                continue
            bound = module.code(loop.iter.args[0].value).strip()
            for statement in _statements(loop.body):
                if not (isinstance(statement, cst.Assign) and len(statement.targets) == 1):
                    continue
                name = dotted(statement.targets[0].target) or ""
                if not name.endswith(".require_backward_grad_sync"):
                    continue
                value = statement.value
                while isinstance(value, cst.BaseExpression) and value.lpar:
                    value = value.with_changes(lpar=(), rpar=())
                if not (isinstance(value, cst.Comparison) and len(value.comparisons) == 1
                        and isinstance(value.comparisons[0].operator, cst.Equal)
                        and dotted(value.left) == target):
                    continue
                k = value.comparisons[0].comparator
                k_text = " ".join(module.code(k).split())
                wrong = (int_value(k) is not None and int_value(k) != _last(bound)) or k_text == bound
                if not wrong:
                    continue
                step = next((s for s in module.calls if s.scope is site.scope and loop not in s.loops
                             and s.method == "step" and is_optimizer_step(self.model, s)
                             and _after(module, loop, s)), None)
                if step is not None:
                    yield statement, step


@dataclass(frozen=True)
class _Pred:
    """`counter ≡ residue (mod modulus)` (equal) or `≢` (not equal); residue is an offset such as
    0 or -1 (that is, modulus - 1)."""

    counter: str
    modulus: str
    residue: int
    equal: bool

    def negate(self) -> _Pred:
        return _Pred(self.counter, self.modulus, self.residue, not self.equal)


def _overlap(no_sync: _Pred, step: _Pred) -> bool | None:
    """Whether some micro-batch both skips synchronisation and is followed by a step."""
    if step.equal and no_sync.equal:
        return step.residue == no_sync.residue
    if step.equal and not no_sync.equal:
        return step.residue != no_sync.residue and abs(step.residue - no_sync.residue) == 1
    return False  # other shapes are not judged


def _predicate(test: cst.BaseExpression) -> _Pred | None:
    """Parse `(c [+ k]) % N ==/!= r`, `not ...`, and a bare `(c + k) % N` (true when != 0)."""
    test = _unparen(test)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _predicate(test.expression)
        return inner.negate() if inner is not None else None
    if isinstance(test, cst.BinaryOperation):
        mod = _modulo(test)
        return _Pred(mod[0], mod[1], -mod[2], False) if mod is not None else None
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    comparison = test.comparisons[0]
    if not isinstance(comparison.operator, (cst.Equal, cst.NotEqual)):
        return None
    mod = _modulo(_unparen(test.left))
    if mod is None:
        return None
    counter, modulus, shift = mod
    right = _unparen(comparison.comparator)
    r = int_value(right)
    if r is None:
        # `N - 1`
        minus = int_value(right.right) if isinstance(right, cst.BinaryOperation) else None
        if (isinstance(right, cst.BinaryOperation) and isinstance(right.operator, cst.Subtract)
                and _text(right.left) == modulus and minus is not None):
            r = -minus
        else:
            return None
    residue = r - shift
    return _Pred(counter, modulus, residue, isinstance(comparison.operator, cst.Equal))


def _modulo(expr: cst.BaseExpression) -> tuple[str, str, int] | None:
    """`(c + k) % N` → (c, N, k)."""
    expr = _unparen(expr)
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo)):
        return None
    left = _unparen(expr.left)
    shift = 0
    if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, (cst.Add, cst.Subtract)):
        k = int_value(left.right)
        if k is None:
            return None
        shift = k if isinstance(left.operator, cst.Add) else -k
        left = _unparen(left.left)
    counter = dotted(left)
    if counter is None:
        return None
    return counter, _text(expr.right), shift


def _guard_predicate(module: ModuleModel, guards: tuple[Guard, ...], counter: str) -> tuple[_Pred, str] | None:
    for guard in reversed(guards):
        pred = _predicate(guard.test)
        if pred is not None and pred.counter == counter:
            return (pred.negate() if guard.negated else pred), module.code(guard.test)
    return None


def _ifexp_holding(module: ModuleModel, site: CallSite) -> cst.IfExp | None:
    """The `a if c else b` whose arm is this call: in a with item, or assigned to the name the
    with uses."""
    for with_node in module.withs:
        for item in with_node.items:
            value = _unparen(item.item)
            if isinstance(value, cst.IfExp) and (_contains(value.body, site.node) or _contains(value.orelse, site.node)):
                return value
    for bindings in site.scope.assignments.values():
        for binding in bindings:
            if isinstance(binding, cst.IfExp) and (_contains(binding.body, site.node) or _contains(binding.orelse, site.node)):
                return binding
    return None


def _reads(expr: cst.CSTNode) -> Iterator[str]:
    """The names and attribute chains an expression reads (`cfg.accum`, `args`)."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = dotted(expr)
        if name is not None:
            yield name
            return
    for child in children(expr):
        yield from _reads(child)


def _contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    if tree is node:
        return True
    return any(_contains(child, node) for child in children(tree))


def _unparen(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.with_changes(lpar=(), rpar=()) if getattr(expr, "lpar", ()) else expr


def _text(expr: cst.BaseExpression) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(_unparen(expr)).split())


def _last(bound: str) -> int | None:
    try:
        return int(bound) - 1
    except ValueError:
        return None


def _statements(body: cst.BaseSuite) -> Iterator[cst.BaseSmallStatement]:
    for line in body.body:
        if isinstance(line, cst.SimpleStatementLine):
            yield from line.body


def _after(module: ModuleModel, loop: cst.For, site: CallSite) -> bool:
    """The call comes after the loop in its function (a later tick than every call inside it)."""
    inside = [s.tick for s in module.calls if loop in s.loops]
    return bool(inside) and site.tick > max(inside)
