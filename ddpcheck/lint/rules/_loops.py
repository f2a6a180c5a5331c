"""Training and evaluation loops: the loops whose iterations are steps (or epochs) of the work a
DDP job does, as opposed to the loops of start-up code (over config entries, dataset files,
state_dict keys).

A loop is one when it iterates a DataLoader (directly, through `enumerate`/`zip`/`tqdm`/a
metric logger's `log_every(loader)`, or through a value that holds one), or when its body —
directly or through the project functions it calls — back-propagates, steps an optimizer, makes
a collective call, or runs such a loop (the epoch loop around `train_one_epoch(...)`); not one whose
body sets the process group up or wraps in DDP a model it builds itself (a loop over whole runs). Everything
is read from the model's recorded calls and loops; answers are memoised per loop and function.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import is_optimizer_step
from ddpcheck.lint.model.module import CallSite, Item, ModuleModel, Point, Scope, Target
from ddpcheck.lint.model.project import resolved_path
from ddpcheck.lint.model.syntax import subexpressions

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model
    from ddpcheck.lint.model.symbols import Function

Loop = cst.CSTNode  # a For or While node, as recorded in CallSite.loops
# Facts (model/facts.py) that make a loop body a step of the job.
_STEP_FACTS = frozenset({"backward", "collective"})
MAX_DEPTH = 3  # project functions followed below a loop
# Assignments followed from a loop's items to the names derived from them in its body.
_DERIVED_STEPS = 4


def _names(node: cst.CSTNode) -> list[cst.Name]:
    return [n for n in subexpressions(node) if isinstance(n, cst.Name)]


def _steps(facts: frozenset[str]) -> bool:
    """Whether a call with these facts is a step of the job. A barrier alone is not: a loop whose
    body only waits for the other ranks (`for split in splits: ...; dist.barrier()`) is start-up
    code, and it is a training loop only where a training loop calls it, or where its body also
    runs a forward on the loop's items (`Loops._forwards_items`)."""
    found = facts & _STEP_FACTS
    return bool(found) and not (found == {"collective"} and "barrier" in facts)


def _held_by_self(func: cst.BaseExpression) -> bool:
    """`self.model`: an object the instance holds, called (a trainer's `self.model(data)`)."""
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"


class Loops:
    def __init__(self, model: Model) -> None:
        self.model = model
        self._loops: dict[int, bool] = {}
        self._functions: dict[tuple[int, str], bool] = {}
        self._open: set[tuple[int, str]] = set()

    # --- loops ---------------------------------------------------------------------------------
    def is_work(self, module: ModuleModel, loop: Loop, scope: Scope, depth: int = 0) -> bool:
        """Whether `loop` (a For/While of `module` in `scope`) is a training or evaluation loop."""
        found = self._loops.get(id(loop))
        if found is None:
            found = self._work(module, loop, scope, depth)
            if depth == 0 or found:
                self._loops[id(loop)] = found
        return found

    def _work(self, module: ModuleModel, loop: Loop, scope: Scope, depth: int) -> bool:
        body = [c for c in module.calls_in(scope.qualname) if loop in c.loops]
        facts = self.model.facts
        if any(self._whole_run(call) for call in body):
            # A loop whose body creates the process group runs that body once per process: a
            # second `init_process_group` raises. One whose body wraps a fresh model in DDP
            # (`for run in range(args.itr): exp = Exp(args); exp.train(); exp.test()`, with the
            # model built and wrapped in the constructor) repeats whole runs, each with its own
            # epoch loop inside: its own messages come once per run, not per epoch.
            return False
        if isinstance(loop, cst.For):
            point = next((f.point for f in module.fors if f.node is loop), None)
            if self.iterates_batches(module, loop.iter, scope, point):
                return True
        forward: bool | None = None
        for call in body:
            direct = facts.direct(call)
            if _steps(direct) or is_optimizer_step(self.model, call):
                return True
            if "barrier" in direct:
                if forward is None:
                    forward = self._forwards_items(loop, body, scope)
                if forward:
                    return True  # a forward and a barrier per item: an evaluation step
        for inner in module.fors:
            # `for epoch in ...:` around `for batch in loader:` whose step is hidden in a method a
            # subclass provides (`self.train_step(batch)` of an abstract trainer).
            if inner.scope is scope and loop in inner.loops \
                    and self.iterates_batches(module, inner.node.iter, scope, inner.point):
                return True
        if depth >= MAX_DEPTH:
            return False
        for call in body:
            for callee, bound in self.model.graph.targets(call):
                if bound in ("spawn", "process"):
                    continue  # `for r in range(n): Process(target=worker).start()`: the work runs elsewhere
                if self.does_work(callee, depth + 1):
                    return True
        return False

    def _whole_run(self, call: CallSite) -> bool:
        """`call` sets the process group up, or wraps in DDP a model it does not take from its
        caller: a model handed in (`Harness(model=net, ...)` at each pruning level, the same
        network trained on in stages) makes the loop one run's stages, not repeated runs."""
        facts = self.model.facts.of_call(call)
        if "init_process_group" in facts:
            return True
        if "ddp_wrap" not in facts:
            return False
        graph = self.model.graph
        return not any(graph.is_network(value)
                       for arg in call.node.args for value in self.model.values.at_call(call, arg.value))

    def forwards_items(self, module: ModuleModel, loop: Loop, scope: Scope) -> bool:
        """Whether the body of `loop` runs a model's forward on the loop's items (`for batch in
        loader: images, targets = batch; outputs = model(images.to(device))`): an evaluation or
        inference step, whatever the loop iterates."""
        return self._forwards_items(loop, [c for c in module.calls_in(scope.qualname) if loop in c.loops], scope)

    def _forwards_items(self, loop: Loop, body: list[CallSite], scope: Scope | None = None) -> bool:
        """Whether the body calls an object that is neither a known API nor a function (of the
        project or imported) with the loop's items (`for x, y in loader: model(x)`, or a model the
        instance holds, `self.model(x)` in a trainer's method; also through
        names the body unpacks or derives from them, a few steps deep: `images, targets = batch`;
        `for path in paths: name = basename(path); lq = load(join(folder, name)); model(lq)`):
        a model's forward."""
        if not isinstance(loop, cst.For):
            return False
        items = {n.value for n in _names(loop.target)}
        if scope is not None:
            for _ in range(_DERIVED_STEPS):
                more = _unpacked(scope, loop, items) - items
                if not more:
                    break
                items |= more
        for call in body:
            func = call.node.func
            if isinstance(func, cst.Name):
                if hasattr(builtins, func.value) \
                        or self.model.resolver.name(call.module, func.value, call.scope) is not None:
                    continue  # a builtin or an imported function: not a model object
            elif not _held_by_self(func):
                continue
            if self.model.api(call) is not None or self.model.graph.targets(call) and not self._own_network_method(call):
                continue  # an API or a project function (a method of the class): not a model object
            if any(n.value in items for a in call.node.args for n in _names(a.value)):
                return True
        return False

    def _own_network_method(self, call: CallSite) -> bool:
        """`self.infer(x)` in a method of a project network (an `nn.Module` subclass) calling
        another method of its own class: the network's own forward on the items (its
        evaluation loop's `logits = self.infer(batch)`)."""
        func = call.node.func
        owner = call.scope.class_scope
        if not _held_by_self(func) or owner is None or not isinstance(func, cst.Attribute):
            return False
        info = call.module.classes.get(owner.qualname)
        path = resolved_path(call.module.path)
        if info is None or path is None:
            return False
        graph = self.model.graph
        if not graph.is_subclass(Target(None, path, owner.qualname, "class"), api.MODULE_BASE):
            return False
        return all(function.owner is not None for function, _ in graph.targets(call))

    def iterates_batches(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope,
                         at: Point | None = None, depth: int = 2) -> bool:
        """Whether iterating `expr` yields a DataLoader's batches: the loader itself, or a call
        that is given one (`enumerate(loader)`, `tqdm(loader)`, `logger.log_every(loader, 10)`)."""
        for value in self.model.values.of(module, expr, scope, at=at):
            call = value.call
            if call is None:
                continue
            if self.model.constructs(value, api.DATALOADER):
                return True
            if depth > 0 and any(
                self.iterates_batches(value.module, a.value, value.scope, value.at, depth - 1) for a in call.args
            ):
                return True
        return False

    def work_loops(self, site: CallSite) -> list[Loop]:
        """The loops around `site` in its own function that are training or evaluation loops."""
        return [loop for loop in site.loops if self.is_work(site.module, loop, site.scope)]

    # --- functions -----------------------------------------------------------------------------
    def does_work(self, function: Function, depth: int = 0) -> bool:
        """Whether a project function trains or evaluates: it back-propagates (itself or through
        its callees), steps an optimizer, or holds a training or evaluation loop."""
        key = (id(function.module), function.qualname)
        found = self._functions.get(key)
        if found is not None:
            return found
        if key in self._open or depth > MAX_DEPTH:
            return False
        self._open.add(key)
        try:
            found = self._function_work(function, depth)
        finally:
            self._open.discard(key)
        if depth == 0 or found:
            self._functions[key] = found
        return found

    def _function_work(self, function: Function, depth: int) -> bool:
        module, qualname = function.module, function.qualname
        if "backward" in self.model.facts.of_scope(module, qualname):
            return True
        scope = module.function_scopes.get(qualname)
        if scope is None:
            return False
        calls = module.calls_in(qualname)
        if any(is_optimizer_step(self.model, c) for c in calls if c.method == "step"):
            return True
        loops: dict[int, Loop] = {}
        for call in calls:
            for loop in call.loops:
                loops.setdefault(id(loop), loop)
        for site in module.fors:
            if site.scope is scope:
                loops.setdefault(id(site.node), site.node)
        return any(self.is_work(module, loop, scope, depth) for loop in loops.values())


def _unpacked(scope: Scope, loop: Loop, items: set[str]) -> set[str]:
    """The names the body of `loop` binds from its items (`images, targets = batch`, `x =
    batch["image"]`), one step."""
    found: set[str] = set()
    for name, bindings in scope.assignments.items():
        if "." in name:
            continue
        for binding, point in zip(bindings, scope.points.get(name, [])):
            if point is None or loop not in point.loops:
                continue
            value = binding.value if isinstance(binding, Item) else binding
            if isinstance(value, cst.CSTNode) and any(n.value in items for n in _names(value)):
                found.add(name)
    return found
