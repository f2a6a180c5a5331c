from __future__ import annotations

import builtins
import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import exclusive_arms
from ddpcheck.lint.model.ddp import is_optimizer_step, wraps
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import Augmented, CallSite, Element, ModuleModel, Param, Scope
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import argument, children, dotted, int_value
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule


class AccumulationWithoutNoSync(Rule):
    """Gradient accumulation with a DDP model all-reduces the gradients of every micro-batch instead of only the last.

    The loop calls `backward()` on several micro-batches per optimizer step (the step sits under
    `if (i + 1) % accum_steps == 0:` or after an inner micro-batch loop), but never enters
    `model.no_sync()` (nor sets `require_backward_grad_sync`) for the non-final ones.

    ## Why it matters
    Every `backward()` of a DDP model launches an all-reduce of all gradients. With 8 accumulation
    steps the job moves 8 times the data over the network for the same update: the results are
    right, but steps are slower, often by tens of percent on multi-node jobs where the
    interconnect is the bottleneck.

    The backward may be made by a project function or method the loop calls
    (`self._run_batch(batch)`), the step's test may be a counter the step's branch resets (`if
    n == cfg.step_per_update: n = 0; optimizer.step()`), the accumulating micro-batches may
    back-propagate in the `else` of the counter test whose arm steps (`if should_step:
    loss = self.training_step(b); scaler.step(opt) else: loss = self.training_step(b)`), and the
    micro-batch loop may sit in a
    method that makes no step, its caller stepping after it (`self.compute_gradients(chunks)`
    then `self.apply_gradients()`). An AMP arm and a plain arm of one `if` (`if conf.half:`
    ... `scaler.step(opt)` / `else:` ... `optimizer.step()`, each under the counter test) are
    one place to fix: reported once, at the first arm's backward.
    The step may also be a project function the loop calls on a counter after a function that
    back-propagates (`engine.train_step(batch)`, then `if engine.steps % k == 0:
    engine.apply_update()`): reported at that function's `backward()`; and the counter test may
    be joined with another (`if should_step or is_last:`).

    Not reported: backward passes of a function that hands its training to another engine
    (`model_engine.backward(loss)` after `deepspeed.initialize(...)`, which accumulates itself);
    files whose code mentions `no_sync` or `require_backward_grad_sync` anywhere
    (they handle it, perhaps through a helper or a `contextlib` switch; a comment, such as a
    `# with model.no_sync():` left commented out, does not count, nor a `no_sync` used only
    under a test only an FSDP model passes, `if isinstance(model, FSDP) and ii != accum - 1:`,
    which leaves the DDP model syncing, nor a
    `with model.no_sync():` around neither the forward nor the backward — `loss =
    criterion(pred, y)` there, the forward before it and `loss.backward()` after it: DDP decides at
    the forward whether the backward syncs; such a block is judged in its own function, the rest of
    the file still trusted), and loops whose step runs
    after every backward — also a sub-batch loop that runs once per batch: `for i in range(0,
    len(data), args.batch_size):` over the batches of a DataLoader built with that same
    `batch_size=args.batch_size` (Horovod's example, whose loader batch is `batch_size *
    batches_per_allreduce`, is still reported) — and a counter test on the arm where the count is
    at most one (`update_grad=(idx + 1) % accum == 0` in the `else:` of `if accum > 1:`), which
    holds on every iteration.

    ## How to fix
    Wrap the forward and backward of the non-final micro-batches in `with model.no_sync():`
    (e.g. `ctx = model.no_sync() if (i + 1) % accum != 0 else contextlib.nullcontext()`), or set
    `model.require_backward_grad_sync = is_last_micro_step` before the forward as nanoGPT does.
    Keep `optimizer.step()` outside the `no_sync` block (see DDP021).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
    - https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation (why skipping the
      sync of non-final micro-batches matters)
    """

    code = "DDP016"
    name = "accumulation-without-no-sync"
    severity = Severity.WARNING
    MESSAGE = (
        "gradient accumulation all-reduces every micro-batch; run the non-final micro-batches' "
        "forward and backward under `with model.no_sync():`"
    )

    VALID = [
        """
        import contextlib
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        for i, (x, y) in enumerate(loader):
            sync = (i + 1) % accum == 0
            with (contextlib.nullcontext() if sync else model.no_sync()):
                loss = model(x).sum() / accum
                loss.backward()
            if sync:
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        # nanoGPT's way: switch the sync flag before each micro-step.
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local_rank])
        while True:
            for micro_step in range(grad_accum):
                model.require_backward_grad_sync = micro_step == grad_accum - 1
                loss = model(x)
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
        """
        # A step after every backward is not accumulation; neither is a scheduler on a modulo.
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        for i, x in enumerate(loader):
            model(x).sum().backward()
            optimizer.step()
            if i % 100 == 0:
                scheduler.step()
        """,
    ]
    INVALID = [
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[local_rank])
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / accum_steps
                loss.backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch
            model = torch.nn.parallel.DistributedDataParallel(model)
            for step in range(max_steps):
                for micro in range(gradient_accumulation_steps):
                    loss = model(next(batches))
                    scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """,
            lines=(6,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        sites = list(model.paths.sites())
        modules = list({id(s.module): s.module for s in sites}.values()) or [model.root]
        # Code, not a comment: `# with model.no_sync():` left commented out syncs every micro-batch.
        # A `with model.no_sync():` around neither the forward nor the backward skips nothing: a
        # function whose every mention is such a block still syncs every micro-batch, whatever
        # the rest of the file does.
        idle: set[tuple[int, str]] = set()
        skipping = False
        for m in modules:
            if not _skips_sync(m.source) or self._fsdp_only_sync(m):
                continue
            mentions = self._no_sync_mentions(m)
            if not mentions or not all(i for _, i in mentions):
                skipping = True
            idle |= {(id(m), f) for f, _ in mentions if f is not None} - {(id(m), f) for f, i in mentions if not i}
        if skipping and not idle:
            return
        if not any(wraps(model, m) for m in modules) and not any(
            "ddp_wrap" in model.facts.of_call(c) for c in model.root.calls if c.target is not None
        ):
            return
        steps = [c for c in sites if c.method == "step" and is_optimizer_step(model, c)]
        # A backward, or a call of a project function that does one (`backward(loss, scaler)`)
        # but no optimizer step of its own.
        # (`self._run_batch(batch)` too: a method of the project, which the graph resolves.)
        # (`model_engine.backward(loss)` after `deepspeed.initialize`: the engine accumulates.)
        sites = [c for c in sites if not model.paths.engine_run(c)]
        backwards = [c for c in sites if c.method == "backward" or (
            c.loops and (c.target is not None and c.target.external is None or self._runs_here(c))
            and {"backward"} <= model.facts.of_call(c) and not any(c is s for s in steps)
            and not self._steps_inside(c, steps))]
        found: dict[int, CallSite] = {}
        for b in backwards:
            if any(s.scope is b.scope and s.loops == b.loops and s.index > b.index and not self._counted(s, b)
                   and not exclusive_arms(s.guards, b.guards) for s in steps):
                continue  # its own step follows it in the same iteration: not accumulation
            for s in steps:
                if s.scope is b.scope and self._accumulates(b, s):
                    # One finding per accumulated step: the last backward before it (an AMP
                    # branch and a plain branch are one place to fix).
                    found[id(s.node)] = b
                    break
            else:
                if b.loops and not any(s.scope is b.scope for s in steps):
                    helper = self._helper_step_on_a_counter(b, steps)
                    if helper is not None:
                        found[id(helper.node)] = self._backward_inside(b)
                        continue
                if b.loops and not any(s.scope is b.scope for s in steps) and self._stepped_after(b, steps):
                    found[id(b.loops[0])] = b
        # An AMP arm and a plain arm of one `if`, each with its own step, are one place to fix:
        # reported once, at the first.
        kept: list[CallSite] = []
        for b in sorted({id(c.node): c for c in found.values()}.values(), key=lambda c: (c.module.path, c.index)):
            if not any(k.module is b.module and k.scope is b.scope and exclusive_arms(k.guards, b.guards) for k in kept):
                kept.append(b)
        if skipping:
            kept = [b for b in kept if (id(b.module), b.scope.qualname) in idle]
        for b in kept:
            self.report(b.node, module=b.module, related=model.paths.chain(b))
        for site in sites if not skipping else ():
            if site.loops and self._steps_on_a_counter(site):
                self.report(site.node, module=site.module, related=model.paths.chain(site))

    def _fsdp_only_sync(self, module: ModuleModel) -> bool:
        """Every `no_sync` / `require_backward_grad_sync` of `module` sits in the body of a test
        only an FSDP model passes (`if isinstance(model, FSDP) and ii != accum - 1:
        maybe_no_sync = model.no_sync`): the DDP model still syncs every micro-batch."""
        mentions: list[bool] = []  # one per mention: whether an FSDP test guards it
        stack: list[tuple[cst.CSTNode, bool]] = [(module.tree, False)]
        while stack:
            node, fsdp = stack.pop()
            if isinstance(node, cst.If):
                stack += [(node.test, fsdp), (node.body, fsdp or self._fsdp_test(module, node.test))]
                if node.orelse is not None:
                    stack.append((node.orelse, fsdp))
                continue
            if isinstance(node, cst.Attribute) and node.attr.value in ("no_sync", "require_backward_grad_sync"):
                mentions.append(fsdp)
            stack += [(child, fsdp) for child in children(node)]
        return bool(mentions) and all(mentions)

    def _no_sync_mentions(self, module: ModuleModel) -> list[tuple[str | None, bool]]:
        """Each `no_sync` / `require_backward_grad_sync` of `module`, with the function it is
        written in (None at module level) and whether it is idle: the `no_sync()` of a `with`
        whose body neither runs the model nor back-propagates (`with self.model.no_sync(): loss =
        self.get_loss(pred, batch)`, the forward before it and `loss.backward()` after it). DDP
        decides at the forward whether the backward syncs, so every micro-batch still syncs. A
        body that calls the model, hands it on, back-propagates, or calls something whose code
        (followed a few calls down) names the model or back-propagates, or that the analysis
        cannot follow, is not idle."""
        idle: set[int] = set()
        mentions: list[tuple[int, str | None]] = []
        stack: list[tuple[cst.CSTNode, str | None, str]] = [(module.tree, None, "")]
        while stack:
            node, function, prefix = stack.pop()
            if isinstance(node, cst.ClassDef):
                prefix = f"{prefix}{node.name.value}."
            elif isinstance(node, cst.FunctionDef):
                function = f"{prefix}{node.name.value}"
                prefix = f"{function}."
            if isinstance(node, cst.With):
                for item in node.items:
                    call = item.item
                    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
                            and call.func.attr.value == "no_sync" and not call.args \
                            and self._idle_body(module, node.body, module.code(call.func.value)):
                        idle.add(id(call.func))
            if isinstance(node, cst.Attribute) and node.attr.value in ("no_sync", "require_backward_grad_sync"):
                mentions.append((id(node), function))
            stack.extend((child, function, prefix) for child in children(node))
        return [(function, key in idle) for key, function in mentions]

    def _idle_body(self, module: ModuleModel, body: cst.CSTNode, receiver: str) -> bool:
        """`body` neither runs `receiver` (the DDP model's text) nor back-propagates, itself or in
        the project functions it calls (three calls down)."""
        named = re.compile(r"(?<![\w.])%s(?!\w)" % re.escape(receiver))
        if "backward" in module.code(body) or named.search(module.code(body)):
            return False
        seen: set[tuple[int, str]] = set()
        frontier: list[CallSite] = []
        stack: list[cst.CSTNode] = [body]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Call):
                site = module.call_at(node)
                if site is not None:
                    frontier.append(site)
            stack.extend(children(node))
        for _ in range(3):
            following: list[CallSite] = []
            for site in frontier:
                targets = self.model.graph.targets(site)
                if not targets and self.model.api(site) is None and _opaque(site.node.func):
                    return False  # a call the analysis cannot follow (a `functools.partial` of the model)
                for function, _bound in targets:
                    key = (id(function.module), function.qualname)
                    if key in seen:
                        continue
                    seen.add(key)
                    code = function.module.code(function.node)
                    if "backward" in code or named.search(code):
                        return False
                    following.extend(function.module.calls_in(function.qualname))
            frontier = following
        return all(not self.model.graph.targets(c) for c in frontier)

    def _fsdp_test(self, module: ModuleModel, test: cst.BaseExpression) -> bool:
        """`isinstance(model, FSDP)`, alone or as a term of an `and`."""
        if isinstance(test, cst.BooleanOperation):
            return isinstance(test.operator, cst.And) and (
                self._fsdp_test(module, test.left) or self._fsdp_test(module, test.right))
        if not (isinstance(test, cst.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2):
            return False
        kinds = test.args[1].value
        named = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        return all((self.model.qualname(module, n) or "").endswith("FullyShardedDataParallel") for n in named)

    def _accumulates(self, b: CallSite, s: CallSite) -> bool:
        n = len(s.loops)
        if n < len(b.loops) and b.loops[:n] == s.loops:
            if all(self._one_pass(b, loop) for loop in b.loops[n:]):
                return False  # sub-batches as large as the loader's batches: one backward per step
            return s.index > b.index  # backward in an inner micro-batch loop, step after it
        if s.loops != b.loops:
            return False
        # Same loop (or a step function a framework calls per batch): the step runs only on
        # some iterations, under a counter test.
        return self._counted(s, b)

    def _counted(self, s: CallSite, b: CallSite) -> bool:
        """The step sits under a counter test (`if (i + 1) % accum == 0:`) that the backward does not."""
        # (The same `if` taken the same way; the `else` of the step's `if`, where the
        # accumulating micro-batches back-propagate, is the other arm of the test.)
        own = {(id(g.node), g.negated) for g in b.guards}
        if any((id(g.node), not g.negated) in own and not self._counter_expr(s, g.test) for g in s.guards):
            # The other arm of an `if` the backward is in (`if conf.half: ... scaler.step(opt)`
            # / `else: ... optimizer.step()`): never the step of the same pass.
            return False
        for guard in s.guards:
            if (id(guard.node), guard.negated) in own:
                continue
            # Written there, or in a flag the loop sets first (`need_update = (j + 1) % freq == 0`).
            if self._counter_expr(s, guard.test):
                return True
        return False

    def _one_pass(self, b: CallSite, loop: cst.CSTNode) -> bool:
        """`for i in range(0, len(data), args.batch_size):` over a batch `data` of a DataLoader
        built with that same `batch_size=args.batch_size` (the same setting of the same object):
        a batch is never longer than the step, so the loop runs once per batch and its backward
        is followed by the step each time. A step or a loader the analysis cannot read is not
        one pass."""
        if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call) or dotted(loop.iter.func) != "range":
            return False
        args = loop.iter.args
        if len(args) != 3 or any(a.keyword is not None or a.star for a in args) \
                or int_value(args[0].value) != 0:
            return False
        batch, step = _length_of(args[1].value), args[2].value
        name = dotted(step)
        if batch is None or name is None:
            return False
        model = self.model
        values = model.values.of(b.module, batch, b.scope, None, at=b.point)
        if not values:
            return False
        for value in values:
            element = value.node
            if not isinstance(element, Element) or element.via_with:
                return False
            if not self._loader_batched_by(value, element.iterable, name, b.scope):
                return False
        return True

    def _loader_batched_by(self, value: Value, iterable: cst.BaseExpression, name: str, scope: Scope) -> bool:
        """The loop iterates DataLoaders all built with `batch_size=<name>`, the name read from
        the same binding as in `scope` (a module-level `args`, not two locals that share a name)."""
        while isinstance(iterable, cst.Call) and dotted(iterable.func) in ("enumerate", "tqdm", "tqdm.tqdm") \
                and iterable.args:
            iterable = iterable.args[0].value
        model = self.model
        root = name.split(".", 1)[0]
        owner = scope.owner_of(root)
        if owner is None or owner.kind != "module":
            return False
        loaders = model.values.of(value.module, iterable, value.scope, value.frame, at=value.at)
        if not loaders:
            return False
        for loader in loaders:
            call = loader.call
            if call is None or model.api_of(loader) != api.DATALOADER:
                return False
            size = argument(call, "batch_size", 1)
            if size is None or dotted(size) != name or loader.scope.owner_of(root) is not owner:
                return False
        return True

    def _runs_here(self, call: CallSite) -> bool:
        """`call` runs a project function in this process (a method, a function passed in): not
        a worker it starts (`mp.Process(target=train)`), which trains on its own."""
        targets = self.model.graph.targets(call)
        return bool(targets) and all(bound not in ("spawn", "process") for _, bound in targets)

    def _helper_step_on_a_counter(self, b: CallSite, steps: list[CallSite]) -> CallSite | None:
        """A call after `b` in the same iteration of a project function that steps the optimizer
        and does not back-propagate (`trainer.optimizer_step()`), under a counter test that `b`
        is not under (`loss = trainer.training_step()` on every batch, then `if step %
        num_steps_update == 0: trainer.optimizer_step()`): the step runs once every so many
        backward passes."""
        for other in b.module.calls_in(b.scope.qualname):
            if other.loops != b.loops or other.index <= b.index or not self._runs_here(other) \
                    or "backward" in self.model.facts.of_call(other):
                continue
            if self._steps_inside(other, steps) and self._counted(other, b):
                return other
        return None

    def _backward_inside(self, call: CallSite) -> CallSite:
        """The one `backward()` the project function `call` runs in its own body (where the
        micro-batch's all-reduce starts, the line a fix goes on), else `call` itself."""
        inside = [c for function, _ in self.model.graph.targets(call)
                  for c in function.module.calls_in(function.qualname) if c.method == "backward"]
        return inside[0] if len(inside) == 1 else call

    def _stepped_after(self, b: CallSite, steps: list[CallSite]) -> bool:
        """`b` back-propagates in a loop over micro-batches of a function that makes no step
        (`def compute_gradients(self, batches): for b in batches: ...backward()`), and a caller
        steps after calling it, in the same iteration (`self.compute_gradients(batches)` then
        `self.apply_gradients()`)."""
        function = self.model.paths.function_of(b)
        if function is None or any(c.scope is b.scope and b.loops[0] in c.loops and self._steps_inside(c, steps)
                                   for c in b.module.calls):
            return False  # the loop steps through a helper: a step per iteration, not accumulation
        for call, _ in self.model.graph.callers(function):
            for after in call.module.calls:
                if after.scope is not call.scope or after.loops != call.loops or after.index <= call.index:
                    continue
                if any(after is s for s in steps) or self._steps_inside(after, steps):
                    return True
        return False

    def _steps_inside(self, call: CallSite, steps: list[CallSite], depth: int = 3) -> bool:
        """The function `call` runs makes an optimizer step of its own (a whole training step),
        itself or in the functions it calls (`_run_batch` → `_process_step`)."""
        for function, _ in self.model.graph.targets(call):
            if any(s.module is function.module and s.scope.qualname == function.qualname for s in steps):
                return True
            if depth > 1 and any(self._steps_inside(inner, steps, depth - 1)
                                 for inner in function.module.calls_in(function.qualname)
                                 if inner.method != "step"):
                return True
        return False

    def _steps_on_a_counter(self, site: CallSite) -> bool:
        """`loss_scaler(loss, optimizer, update_grad=(i + 1) % accum == 0)`: the callee runs
        backward on every call and the optimizer step only when a parameter says so, and this
        call passes it a counter test."""
        for callee, bound in self.model.graph.targets(site):
            param = self._step_switch(callee)
            if param is None:
                continue
            passed = self.model.graph.argument_for(site, callee, param, bound)
            if isinstance(passed, cst.BaseExpression) and self._counter_expr(site, passed):
                return True
        return False

    def _counter_expr(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """A counter test, written there or in the variable's assignment
        (`is_update = True if step % args.grad_acc == 0 else False`). Not one whose every
        divisor the site's guards hold at one or less (`(idx + 1) % accum == 0` in the `else:`
        of `if accum > 1:`): there it holds on every iteration, nothing accumulates."""
        if _divisors_at_most_one(site, expr):
            return False
        if _counter(site.module.code(expr)):
            return True
        if isinstance(expr, cst.BooleanOperation):
            # `if should_step or is_last:` with `should_step = (i + 1) % accum == 0`: a counter
            # test still, the step also taken at the end of the epoch.
            return self._counter_expr(site, expr.left) or self._counter_expr(site, expr.right)
        if self._reset_counter(site, expr):
            return True
        name = dotted(expr)
        if name is None:
            return False
        return any(isinstance(b, cst.BaseExpression) and _counter(site.module.code(b))
                   for b in site.scope.reaching(name, site.point))

    @staticmethod
    def _reset_counter(site: CallSite, expr: cst.BaseExpression) -> bool:
        """`if num_iter == config.step_per_update:` around the step, where the loop counts
        `num_iter += 1` and the step's branch sets it back (`num_iter = 0`): the step runs once
        every so many iterations."""
        if not isinstance(expr, cst.Comparison) or len(expr.comparisons) != 1 or not isinstance(
                expr.comparisons[0].operator, (cst.Equal, cst.GreaterThanEqual)):
            return False
        name = dotted(expr.left)
        owner = site.scope.owner_of(name) if name else None
        if owner is None or name is None:
            return False
        counted = reset = False
        for bound, point in zip(owner.assignments.get(name, []), owner.points.get(name, [])):
            if isinstance(bound, Augmented):
                counted = counted or isinstance(bound.node.operator, cst.AddAssign) and point is not None \
                    and bool(point.loops)
            elif isinstance(bound, cst.Integer) and point is not None \
                    and any(g.test is expr and not g.negated for g in point.guards):
                reset = True
        return counted and reset

    def _step_switch(self, function: Function) -> Param | None:
        calls = list(function.module.calls_in(function.qualname))
        if not any(c.method == "backward" for c in calls):
            return None
        for c in calls:
            if c.method != "step" or not is_optimizer_step(self.model, c):
                continue
            for guard in c.guards:
                name = dotted(guard.test)
                if name is None or guard.negated:
                    continue
                for binding in function.scope.assignments.get(name, []):
                    if isinstance(binding, Param) and binding.function == function.qualname:
                        return binding
        return None


def _length_of(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` in `len(x)`, `x.size(0)`, `x.shape[0]`: the length of a batch along its first dimension."""
    if isinstance(expr, cst.Call) and len(expr.args) == 1 and expr.args[0].keyword is None:
        if dotted(expr.func) == "len":
            return expr.args[0].value
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "size" and int_value(expr.args[0].value) == 0:
            return expr.func.value
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape" \
            and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index) \
            and int_value(expr.slice[0].slice.value) == 0:
        return expr.value.value
    return None


_BUILTINS = frozenset(vars(builtins))


def _opaque(func: cst.BaseExpression) -> bool:
    """A callee the analysis cannot see into that may run the model: a local or a parameter
    (`compute_losses()` of `functools.partial(diffusion.losses, model, ...)`), or an attribute
    of the object (`self.loss_fn(...)`). Not a builtin, nor a method of a value
    (`(w * loss).sum()`), which is a tensor's."""
    if isinstance(func, cst.Name):
        return func.value not in _BUILTINS
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"


def _skips_sync(source: str) -> bool:
    if "no_sync" not in source and "require_backward_grad_sync" not in source:
        return False
    code = code_only(source)
    return "no_sync" in code or "require_backward_grad_sync" in code


def _divisors_at_most_one(site: CallSite, expr: cst.BaseExpression) -> bool:
    """Every `a % n` in `expr` has a divisor `n` that a guard of `site` holds at one or less: the
    arm of `if n > 1:` (or `n >= 2`, `n != 1`) not taken, or that of `if n == 1:` / `n <= 1` / `n < 2` taken."""
    divisors: list[str] = []
    pending: list[cst.CSTNode] = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            divisors.append(" ".join(site.module.code(node.right).split()))
        pending.extend(children(node))
    if not divisors:
        return False
    small: set[str] = set()
    for guard in site.guards:
        test = guard.test
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        op, bound = test.comparisons[0].operator, int_value(test.comparisons[0].comparator)
        if bound is None:
            continue
        left = " ".join(site.module.code(test.left).split())
        held_small = (isinstance(op, (cst.GreaterThan, cst.NotEqual)) and bound == 1
                      or isinstance(op, cst.GreaterThanEqual) and bound == 2) if guard.negated else (
            isinstance(op, (cst.Equal, cst.LessThanEqual)) and bound == 1 or isinstance(op, cst.LessThan) and bound == 2)
        if held_small:
            small.add(left)
    return all(d in small for d in divisors)


def _counter(code: str) -> bool:
    return "%" in code or "accum" in code.lower()
