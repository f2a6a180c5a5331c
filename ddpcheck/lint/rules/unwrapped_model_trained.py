from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.conditions import exclusive_arms
from ddpcheck.lint.model.ddp import MODULE_API, Wrap, before, forwards_to_module, holds_ddp, holds_parameters, is_ddp, runs_layers, wraps
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.paths import is_no_grad
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import children, is_false, is_true
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule


class UnwrappedModelTrained(Rule):
    """The training step calls the module inside DDP instead of the DDP wrapper: gradients are never synchronized.

    DDP all-reduces gradients from hooks that only its own `forward` arms. Calling the inner module
    (`model(x)` after `ddp_model = DDP(model)`, `ddp_model.module(x)`, or an alias such as
    `model_without_ddp = model.module`) in a loop that also calls `backward()` bypasses them.

    ## Why it matters
    Nothing crashes and the loss goes down on every rank, but each rank only learns from its own
    shard: the replicas drift apart, rank 0 saves a model trained on 1/N of the data, and
    evaluation numbers differ from rank to rank. Often noticed only when a multi-GPU run is worse
    than a single-GPU one.

    The model is followed through `torch.compile` (the compiled wrapper forwards attribute reads, so
    `torch.compile(ddp_model).module` is the module inside DDP) and through the project: `net = model.module if isinstance(model, DDP)
    else model` in a helper, or `if type(model) == DDP: model = model.module` before
    `model.forward(x)` (an `if` without `else` rebinds the name on the runs it is handed a
    wrapper), a wrapper kept only for its module (`self.model = DDP(net).module`), a loss method
    held in a variable (`loss_fn = loss_fn or self.model.calculate_loss`, the default `None`
    left), a property that returns `self.model.module`, a method of the inner
    module (`model.module.encode(x)` in a loop, or `self._get_model().compute_loss(batch)` in a
    step function when that method runs the network's own layers), a part of it that has weights
    of its own (`vae.module.encoder(x)` then `vae.module.decoder(z)`: a submodule set to a layer
    or a network with parameters; a parameter-free one such as a noise module is not reported),
    a step function that returns
    the loss to a loop that calls backward, a method of the inner module kept on the wrapper
    under its own name (`model.log_prob = model.module.log_prob`, then `model.log_prob(x)` in
    the loop), a method of the inner module read through a project subclass of DDP whose
    `__getattr__` hands what the wrapper lacks to `self.module` (`models["gen"].train_loss(x)` on
    `DDPWrapper(gen)`: the wrapper's own forward never runs; the model may be kept in a dict,
    `models["gen"] = DDPWrapper(...)` in one arm of an `if`, and handed to the epoch function in
    it), a function of the project that the step hands the inner module to
    (`forward_step(self.model.module, batch)` in a step function the loop calls; reported at
    that call), a forward two calls below the loop (a step function calling a helper that
    calls the network), a method of a part of the inner module whose
    result gets a backward of its own (`aux = net.module.entropy.aux_loss(); aux.backward()`
    after the main loss's backward: that backward runs after DDP's reducer has finished, so
    its gradients stay local). Several such calls on one path of a step (`encode`, then `decode`,
    then `project`) are one finding at the first, naming the others: one fix covers them. Not
    reported: the inner module called after its parameters were frozen in the same function (`for
    p in raw_netD.parameters(): p.requires_grad = False`, `requires_grad_(False)`, a helper's
    `requires_grad(raw_netD, False)`) and not thawed before the call — a GAN's generator step
    through the discriminator, which takes no gradient there; a method of the inner module called in
    a step whose forward goes through the DDP wrapper (`model(x)` or `model.forward(x)`;
    `model.module.reset()` each epoch,
    `model.module.update_memory(batch)` before `loss = model(batch)`: upkeep beside a
    synchronised forward; the wrapper of another model, such as a GAN's discriminator, is not
    this one's forward, nor is a call of the wrapper under `torch.no_grad()`), unless its result
    gets a backward of its own; a term of the inner module added to the wrapper's loss and
    back-propagated with it (`(ddp(x).mean() + net.module.penalty(y)).backward()`), which is
    synchronised: autograd sums each parameter's gradient from both terms before the
    accumulation whose hook DDP's reducer waits on; calls of the
    inner module under `torch.no_grad()` /
    `torch.inference_mode()` (a block or a decorator),
    under a rank-0 guard (evaluating the plain module on the main process is the right way to
    avoid a hang), on the single-process path only (the `else` of `if use_ddp and world_size >
    1:`, where the run never wrapped the model), or in loops without a `backward()`. A loop of forwards inside the step (one
    per ensemble member, `preds.append(net.rollout(x))`) whose results the step back-propagates
    after the loop is part of the training step. A method of the network counts as running its
    layers unless it is known not to: one that calls an attribute of the network which is no
    method of its class (`self.encoder(x)` with `self.encoder = encoder_cls(dim)`, a class
    chosen at run time) may run layers.

    ## How to fix
    Call the DDP wrapper in the training step (`out = ddp_model(x)`); keep `.module` for saving,
    EMA updates and rank-0 evaluation. Rebinding the name (`model = DDP(model)`) avoids the mix-up.

    ## References
    - https://pytorch.org/docs/stable/notes/ddp.html (gradient synchronization happens in the hooks
      DDP's forward prepares)
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP013"
    name = "unwrapped-model-trained"
    severity = Severity.ERROR

    VALID = [
        """
        # Upkeep of the inner module beside a forward through the wrapper.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(net)
        for epoch in range(10):
            ddp.module.reset_memory()
            for x in loader:
                ddp.module.update_memory(x)
                loss = ddp(x).sum()
                loss.backward()
        """,
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = Net().to(rank)
        ddp_model = DDP(model, device_ids=[rank])
        for x, y in loader:
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
            optimizer.step()
        torch.save(model.state_dict(), "ckpt.pt")
        """,
        """
        # Evaluation through the inner module: under no_grad, or on rank 0 only.
        from torch.nn.parallel import DistributedDataParallel as DDP
        import torch
        model = DDP(net, device_ids=[local_rank])
        model_without_ddp = model.module
        for x, y in loader:
            model(x).sum().backward()
        with torch.no_grad():
            for x, y in val_loader:
                out = model_without_ddp(x)
        if rank == 0:
            for x, y in val_loader:
                out = net(x)
        """,
        """
        # Rebound name: `model` is the DDP model from here on.
        import torch
        model = torch.nn.parallel.DistributedDataParallel(model)
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
        """,
        """
        # Wrapped in one branch, the plain model trained in the other.
        from torch.nn.parallel import DistributedDataParallel as DDP
        if distributed:
            ddp = DDP(model)
            for x in loader:
                ddp(x).sum().backward()
        else:
            for x in loader:
                model(x).sum().backward()
        """,
        """
        # EMA and the inner module used outside the forward of the step.
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model)
        for x in loader:
            ddp(x).sum().backward()
            ema.update(model)
            params = model.parameters()
        """,
    ]
    INVALID = [
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = Net().to(rank)
            ddp_model = DDP(model, device_ids=[rank])
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch
            model = torch.nn.parallel.DistributedDataParallel(model)
            for x in loader:
                out = model.module(x)
                out.sum().backward()
            """,
            lines=(4,),
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[gpu])
            model_without_ddp = model.module
            def train_one_epoch():
                for x in loader:
                    loss = criterion(model_without_ddp(x))
                    scaler.scale(loss).backward()
            """,
            lines=(6,),
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            class Trainer:
                def __init__(self, net):
                    self.model = DDP(net)
                def step(self, x):
                    loss = self.model.module(x).mean()
                    loss.backward()
            """,
            lines=(6,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        sites = list(model.paths.sites())
        modules = list({id(s.module): s.module for s in sites}.values())
        inner: dict[int, list[tuple[Value, Wrap]]] = {}
        self._wraps: dict[int, list[Wrap]] = {}
        for module in modules:
            for wrap in wraps(model, module):
                self._wraps.setdefault(id(wrap.site.node), []).append(wrap)
                if wrap.inner is None:
                    continue
                for value in model.values.of(module, wrap.inner, wrap.site.scope, at=wrap.site.point):
                    inner.setdefault(id(value.node), []).append((value, wrap))
        if not inner:
            return
        backwards = [s for s in sites if s.method == "backward"]
        if not backwards:
            return
        self._steps: dict[tuple[int, str, int], bool] = {}
        # One finding per step function and wrapper: `model.module.encode(x)`, `.decode(...)` and
        # `.project(...)` in one step are one mistake with one fix (call the wrapper).
        found: dict[tuple[object, ...], list[tuple[CallSite, str]]] = {}
        for site in sites:
            if not _unresolved_callee(site):
                continue
            # The forward may sit two calls below the loop (`_train_step` calls
            # `forward_step(self.model.module, batch)`, or a diffusion wrapper's `loss()` calls
            # its `_v_loss()`, which runs the network it kept). Asked first: it rules out most
            # calls for a fraction of what evaluating each callee costs.
            if not self._in_training_step(site, backwards, 2):
                continue
            ran = self._runs_inner(site, inner)
            if ran is None or _frozen_before(site):
                continue
            if model.paths.single_up(site):
                # The `else` of `if use_ddp and world_size > 1:` (or a function only such an arm
                # calls) trains the model the run never wrapped: no gradients to all-reduce.
                continue
            handed = self._handed_inner(site, inner)
            at = handed or site
            name = " ".join(at.module.code(at.node.func).split())
            outer = f"`{ran.outer[0]}(...)`" if ran.outer else "the DDP wrapper"
            if handed is None and self._step_calls_wrapper(site, ran):
                advice = f"back-propagate it in one backward with the loss of {outer}"
            elif ran.outer and f"`{ran.outer[0]}(...)`" == f"`{name}(...)`":
                # (`self.model = DDP(self.model)` then `self.model = self.model.module`: the same
                # name held the wrapper and now holds what it wraps.)
                advice = f"keep the DDP wrapper in `{name}` (do not replace it by its `.module`) and call it " \
                         "in the training step"
            else:
                advice = f"call {outer} in the training step"
            what = f"`{name}(...)` is handed the module inside DDP and runs it" if handed is not None \
                else f"`{name}(...)` runs the module inside DDP"
            # (Calls under different tests are phases of their own: `if train_encoder:` runs
            # `.encoder(x)`, `if train_decoder:` runs `.decoder(z)`, each reported.)
            key = (id(at.module), at.scope.qualname, id(ran.site.node),
                   tuple((id(g.node), g.negated) for g in at.guards))
            found.setdefault(key, []).append((at, f"{what}, so its gradients are never all-reduced and the "
                                                  f"replicas drift apart; {advice}"))
        for calls in found.values():
            at, message = calls[0]
            named = [f"`{' '.join(o.module.code(o.node.func).split())}(...)`" for o, _ in calls]
            others = [n for n in dict.fromkeys(named[1:]) if n != named[0]]
            if others:
                message += f" (this step also runs it through {', '.join(others)})"
            self.report(at.node, message, module=at.module, related=model.paths.chain(at))

    def _runs_inner(self, site: CallSite, inner: dict[int, list[tuple[Value, Wrap]]]) -> Wrap | None:
        """The wrap whose inner module `site` runs: a call of it (`model(x)`, `ddp.module(x)`,
        `self.net(x)`), or of one of its own methods (`model.module.encode(x)`), when the callee
        cannot be the DDP wrapper at that point."""
        if not _unresolved_callee(site):
            return None
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "forward" and not _on_self(func):
            func = func.value  # `net.forward(x)` runs what `net(x)` runs, minus the hooks
        values = self.model.values.at_call(site, func)
        if any(holds_ddp(self.model, v) and before(v, site) for v in values):
            return None
        found = self._match(site, values, inner)
        if found is None and isinstance(func, cst.Attribute) and func.attr.value not in MODULE_API \
                and all(v.node is func for v in values) and not _on_self(func) \
                and ((site.loops and not self._runs_no_layers(site)) or self._runs_layers(site)):
            # A method of the module (`model.module.encode(x)`), counted in a loop, or in a
            # step function when the method runs the network's layers
            # (`self._get_model().compute_loss(batch)`): a one-off call
            # (`configure_optimizers()`) is set-up, not a training step.
            values = self.model.values.at_call(site, func.value)
            held = [v for v in values if holds_ddp(self.model, v) and before(v, site)]
            if held and all(forwards_to_module(self.model, v, func.attr.value) for v in held):
                # `ddp.train_loss(x)` on a DDP subclass whose `__getattr__` hands what it lacks
                # to `self.module`: the inner module's method runs, as `ddp.module.train_loss(x)`.
                found = next((w for v in held for w in self._wraps.get(id(v.call), ())), None)
            elif held:
                return None
            else:
                found = self._match(site, values, inner)
            if found is not None and self._step_calls_wrapper(site, found) and not self._own_backward(site, found):
                return None  # the step's forward goes through DDP; this is side work (memory, reset)
        elif found is None and isinstance(func, cst.Attribute) and func.attr.value not in MODULE_API \
                and not _on_self(func) and values and all(
                    v.node is not func and holds_parameters(self.model, v) for v in values):
            # A part of the module with weights of its own (`vae.module.encoder(x)`): its
            # forward runs outside DDP's hooks as the whole module's would.
            values = self.model.values.at_call(site, func.value)
            if any(holds_ddp(self.model, v) and before(v, site) for v in values):
                return None
            found = self._match(site, values, inner)
            if found is not None and self._step_calls_wrapper(site, found) and not self._own_backward(site, found):
                return None
        elif found is None and values and all(
                isinstance(v.node, cst.Attribute) and v.node is not func and v.node.attr.value not in MODULE_API
                and not _on_self(v.node) for v in values):
            # A method taken off the inner module and kept under another name
            # (`model.log_prob = model.module.log_prob` after the wrap, then `model.log_prob(x)`):
            # the call runs that method, as `model.module.log_prob(x)` would.
            receivers = [r for v in values if isinstance(v.node, cst.Attribute)
                         for r in self.model.values.of(v.module, v.node.value, v.scope, v.frame, at=v.at)]
            if any(holds_ddp(self.model, r) and before(r, site) for r in receivers):
                return None
            found = self._match(site, receivers, inner)
            if found is not None and not ((site.loops and not self._runs_no_layers(site)) or self._runs_layers(site)):
                return None
            if found is not None and self._step_calls_wrapper(site, found) and not self._own_backward(site, found):
                return None
        if found is None and site.loops and isinstance(func, cst.Attribute) and func.attr.value not in MODULE_API \
                and not _on_self(func):
            found = self._part_method(site, func, inner)
        return found

    def _handed_inner(self, site: CallSite, inner: dict[int, list[tuple[Value, Wrap]]]) -> CallSite | None:
        """The call that hands the inner module, spelled `x.module`, to the function that runs it
        (`forward_step(self.model.module, batch)`): the step chose the unwrapped model there,
        and the function itself may be right for a plain model."""
        enclosing = self.model.paths.function_of(site)
        if enclosing is None:
            return None
        for caller, _ in self.model.graph.callers(enclosing):
            for arg in caller.node.args:
                if isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "module" \
                        and self._match(caller, self.model.values.at_call(caller, arg.value), inner) is not None:
                    return caller
        return None

    def _part_method(self, site: CallSite, func: cst.Attribute, inner: dict[int, list[tuple[Value, Wrap]]]) -> Wrap | None:
        """`ddp.module.entropy_model.aux_loss()`: a method of a part of the inner module (an
        attribute chain below `.module` or below the inner module's own name) whose result the step
        back-propagates in a backward of its own. Parts are often kept up beside the step
        (`ddp.module.quantizer.update(x)`), so only a result that reaches such a backward counts."""
        receiver = func.value
        for _ in range(3):
            if not isinstance(receiver, cst.Attribute) or receiver.attr.value in MODULE_API:
                return None
            receiver = receiver.value
            values = self.model.values.at_call(site, receiver)
            if not values or any(holds_ddp(self.model, v) and before(v, site) for v in values):
                return None
            found = self._match(site, values, inner)
            if found is not None:
                return found if self._own_backward(site, found) else None
        return None

    def _own_backward(self, site: CallSite, wrap: Wrap) -> bool:
        """The result of `site` reaches a `backward()` later in its function (through the names it
        is assigned to, `aux = net.module.aux_loss(); aux.backward()`) that no result of the DDP
        wrapper `wrap` reaches. One backward of a sum of both (`loss = ddp(x).mean() +
        net.module.penalty(y)`) is synchronised: autograd sums each parameter's gradient from both
        parts before the accumulation that fires DDP's hook; a backward of its own runs after
        the reducer has finished, and its gradients stay local."""
        scope = site.scope.node
        if site.scope.kind != "function" or not isinstance(scope, cst.FunctionDef):
            return False
        assigned = _assignments(scope)
        calls = [c for c in site.module.calls_in(site.scope.qualname)]
        ddp_calls: list[cst.CSTNode] = []
        for other in calls:
            func = other.node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "forward":
                func = func.value
            if other.qualname is None and isinstance(func, (cst.Name, cst.Attribute)) and any(
                    is_ddp(self.model, v) and v.call is wrap.site.node for v in self.model.values.at_call(other, func)):
                ddp_calls.append(other.node)
        fed = _fed_names(assigned, [site.node], detached=False)
        through_ddp = _fed_names(assigned, ddp_calls, detached=True)
        for other in calls:
            if other.method != "backward" or other.tick < site.tick:
                continue
            if _mentions(other.node, fed, {id(site.node)}) \
                    and not _mentions(other.node, through_ddp, {id(n) for n in ddp_calls}):
                return True
        return False

    def _step_calls_wrapper(self, site: CallSite, wrap: Wrap) -> bool:
        """Whether the training step around `site` (its innermost loop, else its function) also
        calls the DDP wrapper `wrap`: then the loss comes from DDP's forward, and a method of the
        inner module called beside it (`model.module.reset()`, `model.module.update_memory(b)`)
        is state upkeep, not a forward that bypasses the hooks. Another model's wrapper (a GAN's
        discriminator) says nothing about this one, nor does a call of the wrapper under
        `torch.no_grad()`, which prepares no gradient reduction."""
        loop = site.loops[-1] if site.loops else None
        for other in site.module.calls_in(site.scope.qualname):
            if other is site or (loop is not None and loop not in other.loops):
                continue
            if exclusive_arms(other.guards, site.guards):
                continue  # the other arm of a stage switch (`if not rl_stage: model(x) else: ...`)
            func = other.node.func
            if other.qualname is not None or not isinstance(func, (cst.Name, cst.Attribute)):
                continue
            if is_no_grad(self.model, other.module, other.withs, None):
                continue  # a forward under no_grad arms no hooks (statistics logged beside the step)
            if isinstance(func, cst.Attribute) and func.attr.value == "forward":
                func = func.value  # `ddp.forward(x)`: DDP's own forward, hooks and all
            if any(is_ddp(self.model, v) and v.call is wrap.site.node for v in self.model.values.at_call(other, func)):
                return True
        return False

    def _runs_no_layers(self, site: CallSite) -> bool:
        """A method of the project's network that runs none of its layers (`reset()` clearing a
        buffer): not a forward, in a loop or not."""
        # (`model.module.reset()`: the call graph resolves it to the method of the class the
        # wrapper holds.)
        callees = [f for f, _ in self.model.graph.targets(site)]
        return bool(callees) and not any(runs_layers(self.model, f) or self._may_run_layers(f) for f in callees)

    def _may_run_layers(self, function: Function) -> bool:
        """The method calls an attribute of its network that is no method of the class
        (`self.encoder(x)` with `self.encoder = encoder_cls(...)`, a class chosen at run time):
        what it holds is unknown, so the method is not known to run no layers."""
        owner = function.owner
        if owner is None:
            return False
        for call in function.module.calls_in(function.qualname):
            func = call.node.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" \
                    and func.attr.value not in MODULE_API \
                    and self.model.graph.method(function.module, owner, func.attr.value) is None:
                return True
        return False

    def _runs_layers(self, site: CallSite) -> bool:
        callees = self.model.graph.targets(site)
        return bool(callees) and all(runs_layers(self.model, f) for f, _ in callees)

    def _match(self, site: CallSite, values: list[Value], inner: dict[int, list[tuple[Value, Wrap]]]) -> Wrap | None:
        for value in values:
            # The same leaf through the same calls: one factory's return is a new object per call.
            wrap = next((w for v, w in inner.get(id(value.node), ()) if self.model.values.same_object(v, value)), None)
            if wrap is None:
                continue
            if self._before_wrap(site, wrap, 2):
                continue  # used before it was wrapped
            if wrap.site.module is site.module and exclusive_arms(wrap.site.guards, site.guards):
                continue  # `if distributed: ddp = DDP(model) ... else: model(x)`
            return wrap
        return None

    def _before_wrap(self, site: CallSite, wrap: Wrap, depth: int) -> bool:
        """`site` runs before the wrap: earlier in the wrap's function, or in a function that
        every caller calls there before the wrap (`model = compile_model(model)`, a warm-up
        forward, then `model = DDP(model)`), followed `depth` calls up."""
        if wrap.site.module is site.module and wrap.site.scope.function is site.scope.function:
            return site.index < wrap.site.index
        enclosing = self.model.paths.function_of(site)
        if enclosing is None or depth <= 0:
            return False
        callers = [c for c, _ in self.model.graph.callers(enclosing)]
        return bool(callers) and all(self._before_wrap(c, wrap, depth - 1) for c in callers)

    def _in_training_step(self, site: CallSite, backwards: list[CallSite], depth: int = 1) -> bool:
        """A forward whose result gets a backward: in the same function and loop as a
        `backward()`, or in a function whose caller runs, in the same loop, a call that does one
        (`loss = self._forward(x)` then `self.scaler(loss, optimizer)`)."""
        # Where the backward is, first: it rules out most calls, and the callers' part is kept
        # per function; the two tests that can still say no cost more per call.
        if not _beside_backward(site, backwards):
            enclosing = self.model.paths.function_of(site)
            if enclosing is None or site.loops or not self._called_in_step(enclosing, depth):
                return False
        function = site.scope.function
        if is_no_grad(self.model, site.module, site.withs, function.qualname if function else None):
            return False
        return not self.model.paths.main_only(site)

    def _called_in_step(self, function: Function, depth: int) -> bool:
        """A caller of `function` runs, in the same loop, a call that does a backward; a caller
        outside any loop (`outputs = forward_model(self.model.module, batch)` in a `_train_step`
        that the epoch loop calls) is followed up, `depth` calls in all."""
        key = (id(function.module), function.qualname, depth)  # asked for each call in the function
        known = self._steps.get(key)
        if known is None:
            known = self._steps[key] = self._called_in_step_now(function, depth)
        return known

    def _called_in_step_now(self, function: Function, depth: int) -> bool:
        for caller, _ in self.model.graph.callers(function):
            if is_no_grad(self.model, caller.module, caller.withs, None):
                continue
            if not caller.loops:
                enclosing = self.model.paths.function_of(caller)
                if depth > 1 and enclosing is not None and enclosing is not function \
                        and not self.model.paths.main_only(caller) and self._called_in_step(enclosing, depth - 1):
                    return True
                continue
            for other in caller.module.calls_in(caller.scope.qualname):
                if other is caller or caller.loops[-1] not in other.loops:
                    continue
                if other.method == "backward" or "backward" in self.model.facts.of_call(other):
                    return True
        return False


def _unresolved_callee(site: CallSite) -> bool:
    """A call whose callee is a value to evaluate (`model(x)`, `ddp.module(x)`, `self.net(x)`),
    not a resolved function or class, nor the running network itself (`self(x)`: the call of
    that method counts)."""
    func = site.node.func
    if site.qualname is not None or not isinstance(func, (cst.Name, cst.Attribute, cst.Call)):
        return False
    return not (isinstance(func, cst.Name) and func.value == "self")


def _beside_backward(site: CallSite, backwards: list[CallSite]) -> bool:
    for b in backwards:
        if b.scope is not site.scope:
            continue
        if site.loops and site.loops[-1] in b.loops:
            return True
        if not site.loops and not b.loops:
            return True
        # A loop of forwards inside the step (one per ensemble member, per rollout) whose
        # results the step's backward, made after that loop, back-propagates.
        if site.loops and b.tick > site.tick and len(b.loops) < len(site.loops) \
                and b.loops == site.loops[:len(b.loops)]:
            return True
    return False



def _assignments(function: cst.FunctionDef) -> list[tuple[list[str], cst.BaseExpression]]:
    """The `name = value` statements of a function's body (not of functions inside it): the names
    bound (a tuple's names, a subscripted or attribute target's base name) and the value."""
    out: list[tuple[list[str], cst.BaseExpression]] = []

    class _Visitor(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            out.append(([n for t in node.targets for n in _bound(t.target)], node.value))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if node.value is not None:
                out.append((_bound(node.target), node.value))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            out.append((_bound(node.target), node.value))

    function.visit(_Visitor())
    return out


def _bound(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _bound(e.value)]
    if isinstance(target, (cst.Subscript, cst.Attribute)):
        return _bound(target.value)
    if isinstance(target, cst.StarredElement):
        return _bound(target.value)
    return []


def _fed_names(assigned: list[tuple[list[str], cst.BaseExpression]], seeds: list[cst.CSTNode],
               detached: bool) -> set[str]:
    """The names whose value is computed from one of `seeds` (calls), directly or through other
    names. `detached`: a value that detaches or reads out a number (`.detach()`, `.item()`)
    still counts."""
    ids = {id(n) for n in seeds}
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for targets, value in assigned:
            if set(targets) <= names or not _mentions(value, names, ids):
                continue
            if not detached and _detaches(value):
                continue
            names |= set(targets)
            changed = True
    return names


def _mentions(node: cst.CSTNode, names: set[str], ids: set[int]) -> bool:
    """`node` contains one of the nodes `ids` or reads one of `names`."""
    found = False

    class _Visitor(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if found:
                return False
            if id(n) in ids or (isinstance(n, cst.Name) and n.value in names):
                found = True
                return False
            if isinstance(n, cst.Attribute):
                n.value.visit(self)  # `x.attr`: the attribute's name is no read of a variable
                return False
            return True

    node.visit(_Visitor())
    return found


def _detaches(value: cst.BaseExpression) -> bool:
    return any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in ("detach", "item")
               for n in _walk(value))


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []

    class _Visitor(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            out.append(n)
            return True

    node.visit(_Visitor())
    return out


def _on_self(func: cst.Attribute) -> bool:
    """`self.encode(x)`: a module calling its own method, inside whatever called it."""
    return isinstance(func.value, cst.Name) and func.value.value == "self"


def _frozen_before(site: CallSite) -> bool:
    """The module `site` calls had its parameters frozen just before, in the same function
    (`for p in raw_netD.parameters(): p.requires_grad = False`, `raw_netD.requires_grad_(False)`,
    a helper `requires_grad(raw_netD, False)`), and not thawed again before the call: it takes
    no gradient there (a GAN's generator step through the discriminator), so none is lost."""
    func = site.node.func
    target = " ".join(site.module.code(func).split())
    last: bool | None = None  # the latest setting before the call: True frozen, False thawed
    for call in site.module.calls_in(site.scope.qualname):
        if call.scope is not site.scope or call.tick >= site.tick:
            continue
        args = [a.value for a in call.node.args]
        setting: bool | None = None
        if call.method == "requires_grad_" and isinstance(call.node.func, cst.Attribute) \
                and " ".join(site.module.code(call.node.func.value).split()) == target and args:
            setting = _false(args[0])
        elif "requires_grad" in (call.dotted or "") and len(args) == 2 \
                and " ".join(site.module.code(args[0]).split()) == target:
            setting = _false(args[1])
        elif call.method == "parameters" and isinstance(call.node.func, cst.Attribute) \
                and " ".join(site.module.code(call.node.func.value).split()) == target:
            setting = _loop_sets_requires_grad(site.scope.node, call.node)
        if setting is not None:
            last = setting
    return last is True


def _false(expr: cst.BaseExpression) -> bool | None:
    """True for the literal False, False for True, None otherwise."""
    return True if is_false(expr) else False if is_true(expr) else None


def _loop_sets_requires_grad(root: cst.CSTNode, parameters: cst.Call) -> bool | None:
    """For the loop `for p in m.parameters(): p.requires_grad = X` over the call `parameters`:
    True when X is False, False when it is True, None when there is no such loop."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.For) and node.iter is parameters:
            for inner in children(node.body):
                for line in (inner.body if isinstance(inner, cst.SimpleStatementLine) else ()):
                    if isinstance(line, cst.Assign) and any(
                            isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                            for t in line.targets):
                        return _false(line.value)
            return None
        stack.extend(children(node))
    return None
