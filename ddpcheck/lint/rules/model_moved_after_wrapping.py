from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import Wrap, before, is_ddp, strip_moves, wraps
from ddpcheck.lint.model.conditions import contradictory, exclusive_arms, on_single_process_only
from ddpcheck.lint.model.module import CallSite, ModuleModel, Param, Point, Scope, Shared
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import children, dotted, subexpressions
from ddpcheck.lint.model.values import Value, in_caller_terms
from ddpcheck.lint.rule import Invalid, Rule

_MOVES = ("to", "cuda", "cpu", "half", "bfloat16", "double")
# Moves that change where or in what type the parameters are, whatever they were before (a DDP
# model's parameters are on its GPU and in the dtype it was built with).
_DEFINITE = ("cpu", "half", "bfloat16", "double")
# The target of a move to the current CUDA device, however it is spelled (see `_current_gpu`).
_CURRENT_GPU = ("cuda", "")


class ModelMovedAfterWrapping(Rule):
    """The model is moved to its device (or cast) after it was wrapped in DDP, instead of before.

    DDP records the device and dtype of every parameter when it is constructed: it broadcasts
    them from rank 0, builds its gradient buckets on that device and, with `device_ids=[i]`,
    expects the module to already live on GPU `i`. Moving the inner module (`model.cuda()` after
    `DDP(model)`) or the wrapper (`ddp_model.to(device)`, `DDP(model).cuda()`) afterwards changes
    the parameters under DDP's feet.

    ## Why it matters
    Depending on the move, construction fails with "module must be on a single device ... got
    device_ids [0] and module parameters {cpu}", the first backward fails with a device mismatch
    inside the reducer, or (for casts) gradients are reduced in buckets of the wrong dtype. The
    error points into DDP internals, far from the line that caused it.

    Also reported where a project helper returns the wrap (`model = wrap_model(model).to(device)`
    with `wrap_model` returning `DistributedDataParallel(model, ...)` when distributed) and the
    module it wraps was not moved before, as far as the lint can follow it; and where a class
    keeps what its constructor is handed (`Trainer(ddp_model)`, `self.model = model`) and one of
    its methods moves it to the CPU or casts it (`self.model.cpu()` to save, then
    `self.model.to(self.device)`), when the attribute may hold the DDP wrapper (a lone
    `self.model.to(device)` there may move nothing and is not reported), or where a function's
    parameter is handed the wrapper or the module it holds (`self._snapshot(self.model.module)`
    with `def _snapshot(self, model): model.cpu()`) and moved to the CPU or cast there — also
    its `.module` moved, `model.module.to("cpu")` in a checkpoint helper handed the wrapper (a
    move to the CPU leaves the GPU whatever it was spelled as). A change of layout counts as a
    cast (`self.net_G = self.net_G.to(memory_format=torch.channels_last)`, also in the
    constructor that is handed the wrapper), and so does a move to any device in a helper handed
    the wrapper (`def test(model, loader, args): model.to(args.device)`) when the module it wraps
    was, as far as the lint can see, never moved before the wrap (built in the wrapping function,
    not by a builder that may move it), and a move of the wrapper through the object that holds
    it (`trainer.model.to("cpu")` to save it, with `Trainer` keeping `self.model = DDP(...)`).
    Not reported: a move to the
    device the module was moved to before the wrap, however the two are spelled (`.cuda()` before,
    `.to(device)` with `device = torch.device("cuda")` after: both the current GPU); a move
    of the module that is then wrapped again (`model.to(device)`, then `DDP(model)` for a second
    stage), where the move comes before the wrap used from then on. Also reported: apex's
    `amp.initialize(model, optimizer, opt_level=...)` handed the DDP wrapper (alone or in a list
    of models), which apex refuses with a RuntimeError at every opt level: it casts the models it
    is given, so it must run before the wrap. Not where the wrap is made only where
    `amp.initialize` is not called (`if not opt.fp16: model = DDP(model)` in a builder
    `create_model(opt)`, the caller's `if opt.fp16: amp.initialize(model, ...)`).

    ## How to fix
    Move (and cast) first, wrap last: `model = Net().to(device); model = DDP(model,
    device_ids=[local_rank])`. Do the same for `SyncBatchNorm` conversion and any other change to
    the module's parameters.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
      (its warning: never change the model's parameters after wrapping it, because the
      constructor registers the gradient reduction on the parameters it sees)
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP014"
    name = "model-moved-after-wrapping"
    severity = Severity.ERROR
    MESSAGE = "the model is moved after DDP wrapped it; move it to its device first, then wrap it in DDP"

    VALID = [
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = Net().to(local_rank)
        model = DDP(model, device_ids=[local_rank])
        """,
        """
        # Moving inside the wrap call is moving first.
        import torch
        model = torch.nn.parallel.DistributedDataParallel(model.cuda(gpu), device_ids=[gpu])
        x = x.to(gpu)
        out = model(x).to("cpu")
        """,
        """
        # Wrap in one branch, move in the other (the ImageNet example's shape): never both.
        import torch
        if args.distributed:
            model.cuda(args.gpu)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        elif torch.cuda.is_available():
            model.cuda()
        else:
            model = model.to("cpu")
        """,
        """
        # A new model built later under the same name is moved before its own wrap.
        from torch.nn.parallel import DistributedDataParallel as DDP
        def main():
            teacher = DDP(Net().cuda())
            model = Net()
            model.cuda()
            model = DDP(model)
        """,
        """
        # A second `.to(device)` to where the module already is moves nothing, also after a
        # SyncBatchNorm conversion (which keeps the module's device); the DataParallel branch
        # is not on the way to the DDP wrap.
        import torch
        from torch.nn.parallel import DataParallel, DistributedDataParallel as DDP
        model = Net().to(args.device)
        if args.dataparallel:
            model = DataParallel(model)
        else:
            if args.sync_bn:
                model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
            model = DDP(model, device_ids=[args.gpu])
        model = model.to(args.device)
        """,
    ]
    INVALID = [
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = Net()
            ddp_model = DDP(model, device_ids=[local_rank])
            ddp_model.to(local_rank)
            """,
            lines=(4,),
        ),
        Invalid(
            """
            import torch
            model = Net()
            model = torch.nn.parallel.DistributedDataParallel(model).cuda()
            """,
            lines=(3,),
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = Net()
            model = DDP(net, device_ids=[gpu])
            net.cuda(gpu)
            """,
            lines=(4,),
        ),
        Invalid(
            """
            # Cast after the wrap: the same device, but not the same dtype.
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = Net().to(device)
            model = DDP(model, device_ids=[local_rank])
            model = model.to(device).half()
            """,
            lines=(5,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        root = model.root
        every_wrap = wraps(model, root)
        for wrap in every_wrap:
            parent_move = self._moved_wrapper_expression(wrap)
            if parent_move is not None:
                self.report(parent_move)
                continue
            watched = {n for n in (*wrap.outer[:1], wrap.inner_name) if n}
            if not watched:
                continue
            # The next rebinding of a watched name ends the watch (a new model under that name).
            inside = {id(n) for n in _descendants(wrap.site.node)}
            for call in root.calls[wrap.site.index + 1:]:
                if call.scope is not wrap.site.scope or id(call.node) in inside \
                        or exclusive_arms(wrap.site.guards, call.guards):
                    continue
                receiver = call.receiver
                # `model.to(device).half()`: each move of a chain on the watched name counts.
                name = dotted(strip_moves(receiver)) if receiver is not None else None
                if call.qualname is None and call.method in _MOVES and name in watched:
                    assert name is not None
                    if self._rebound_between(wrap, call, name):
                        watched.discard(name)
                        continue
                    if self._already_there(wrap, call.node):
                        continue
                    if any(w.site.scope is call.scope and w.site.index > call.index and w.inner_name == name
                           for w in every_wrap):
                        # `model.to(device)` then `DDP(model)` again (a second stage re-wraps the
                        # module): the move comes before the wrap that is used from then on.
                        watched.discard(name)
                        continue
                    self.report(call.node)
                    break
        self._returned_wraps()
        self._moved_held_wraps()
        self._amp_initialized_wraps()

    def _amp_initialized_wraps(self) -> None:
        """apex's `amp.initialize(models, optimizer, opt_level=...)` handed the DDP wrapper (alone
        or in a list of models): apex casts the models it is given and refuses a DDP or
        DataParallel one with a RuntimeError ("Parallel wrappers should only be applied to the
        model(s) AFTER the model(s) have been returned from amp.initialize")."""
        model = self.model
        for site in model.paths.sites():
            if model.api(site) != api.APEX_AMP_INITIALIZE:
                continue
            models = site.arg("models", 0)
            if models is None:
                continue
            exprs = [e.value for e in models.elements] if isinstance(models, (cst.List, cst.Tuple)) else [models]
            if any(is_ddp(model, v) and before(v, site) and not self._wrapped_off_this_path(v, site)
                   for e in exprs for v in model.values.at_call(site, e)):
                self.report(
                    site.node,
                    "apex `amp.initialize` is handed the model after DDP wrapped it: apex refuses a "
                    "DDP-wrapped model (RuntimeError) and casts the models it is given; call "
                    "`amp.initialize` first, then wrap its result in DDP",
                    module=site.module, related=model.paths.chain(site),
                )

    def _wrapped_off_this_path(self, value: Value, site: CallSite) -> bool:
        """The wrap `value` comes from runs only where `site` cannot: its tests contradict those
        of `site` (`if not opt.fp16: model = DDP(model)` in the builder `create_model(opt)`, and
        `if opt.fp16: amp.initialize(model, ...)` in its caller), the builder's tests read in the
        caller's terms (values.in_caller_terms)."""
        made = value.module.call_at(value.call) if value.call is not None else None
        if made is None:
            return False
        frame = value.frame
        if frame is None:
            return made.scope is site.scope and contradictory(made.guards, site.guards)
        if frame.caller is not None or frame.call.scope is not site.scope or made.scope is not frame.function.scope:
            return False
        translated = in_caller_terms(made.guards, frame)
        return translated is not None and contradictory(translated + frame.call.guards, site.guards)

    def _moved_held_wraps(self) -> None:
        """`self.model.cpu()` in a method of a class whose constructor keeps what it is handed
        (`Trainer(ddp_model)`, `self.model = model`), where that may be the DDP wrapper: the
        method runs on the built object, so after the wrap. Reported for a move that certainly
        changes where the parameters are (`cpu()`, a cast) and for the moves of the same
        attribute after it in that method (`self.model.to(device)` back); a lone `to(device)`
        may move nothing, which the lint cannot tell from another function, so it is left."""
        model = self.model
        done: set[int] = set()
        for site in model.paths.sites():
            if site.qualname is not None or site.receiver is None or site.method not in _MOVES:
                continue
            definite = site.method in _DEFINITE or _to_cpu(site.node) or _changes_layout(site.node)
            if not definite and not self._moves_unmoved_wrap(site):
                continue
            name = dotted(strip_moves(site.receiver))
            if name is not None and name.endswith(".module") and name.count(".") == 1:
                # `model.module.to("cpu")` of a parameter handed the wrapper: the wrapped module
                # is the one DDP holds.
                name = name[:-len(".module")]
                if not self._handed_wrap(site, name, inner=True):
                    continue
            elif not self._held_wrap(site, name):
                continue
            assert name is not None
            if "." not in name:
                # A parameter handed the wrapper: the fix is at the move that leaves the device
                # (copy the state to the CPU instead); the move back goes with it.
                if id(site.node) not in done:
                    done.add(id(site.node))
                    self.report(site.node, module=site.module, related=model.paths.chain(site))
                continue
            for later in site.module.calls_in(site.scope.qualname):
                if later.scope is not site.scope or later.index < site.index or id(later.node) in done:
                    continue
                if later is site or later.qualname is None and later.method in _MOVES \
                        and later.receiver is not None and dotted(strip_moves(later.receiver)) == name:
                    done.add(id(later.node))
                    self.report(later.node, module=later.module, related=model.paths.chain(later))

    def _moves_unmoved_wrap(self, site: CallSite) -> bool:
        """A move to a device (`model.to(args.device)` in an evaluation helper) of what may be a
        DDP wrapper whose module, everywhere the model can see, was never moved before the wrap
        (the other values it may hold, the plain model of a single-process run, move freely):
        whatever device it names, the parameters change device under DDP."""
        receiver = site.receiver
        if receiver is None:
            return False
        held = [v for v in self.model.values.at_call(site, strip_moves(receiver)) if is_ddp(self.model, v)]
        for value in held:
            made = value.module.call_at(value.call) if value.call is not None else None
            if made is None or not self._unmoved_before(made, value):
                return False
            inner = made.arg("module", 0)
            assert inner is not None
            leaves = self.model.values.of(value.module, inner, value.scope, value.frame, at=made.point)
            if not leaves or any(leaf.scope is not made.scope or leaf.call is None for leaf in leaves):
                return False  # built by a function that may move it before it returns it
        return bool(held)

    def _held_wrap(self, site: CallSite, name: str | None) -> bool:
        """`name` is `self.attr` in a method (not the constructor) of a class that sets the
        attribute in its constructor only, and it may hold the DDP wrapper there; or `name` is a
        parameter the function never rebinds, and a caller hands it the DDP wrapper
        (`self._snapshot(self.model)` with `def _snapshot(self, model): model.cpu()`)."""
        if name is not None and "." not in name:
            return self._handed_wrap(site, name)
        if name is not None and name.count(".") == 1 and not name.startswith("self."):
            # `trainer.model.to("cpu")` on an object whose attribute holds the wrapper.
            return self._on_distributed_path(site) and self._receiver_holds_wrap(site)
        if name is None or not name.startswith("self.") or name.count(".") != 1:
            return False
        function = site.scope.function
        owner = site.scope.class_scope
        if function is not None and owner is not None and function.name == "__init__":
            # `self.net = self.net.to(memory_format=...)` in the constructor, the attribute just
            # set from what it is handed: the wrapper, when the callers hand it one.
            return self._on_distributed_path(site) and self._receiver_holds_wrap(site)
        if function is None or owner is None or name in function.assignments:
            return False
        bindings = owner.assignments.get(name, [])
        if not bindings or not all(isinstance(b, Shared) and b.scope.name == "__init__" for b in bindings):
            return False
        return self._on_distributed_path(site) and self._receiver_holds_wrap(site)

    def _on_distributed_path(self, site: CallSite) -> bool:
        return on_single_process_only(site.guards, self.model.resolver_for(site.module, site.scope)) is None

    def _receiver_holds_wrap(self, site: CallSite) -> bool:
        """The receiver of `site` may hold the DDP wrapper."""
        receiver = site.receiver
        return receiver is not None and any(
            is_ddp(self.model, v) for v in self.model.values.at_call(site, strip_moves(receiver)))

    def _handed_wrap(self, site: CallSite, name: str, inner: bool = False) -> bool:
        """Parameter `name` of the function `site` is in, never rebound there, is handed the
        DDP wrapper (or the module it holds); `inner`: the move is of its `.module`, and only the
        wrapper itself counts."""
        function = site.scope.function
        if function is None or site.receiver is None:
            return False
        bindings = function.assignments.get(name, [])
        if not bindings or not all(isinstance(b, Param) for b in bindings) or not self._on_distributed_path(site):
            return False
        if inner:
            return any(is_ddp(self.model, v) for v in self.model.values.at_call(site, cst.Name(name)))
        if self._receiver_holds_wrap(site):
            return True
        # Handed the module the wrapper holds (`self._snapshot(self.model.module)`): moving it
        # moves the wrapped parameters just the same.
        param = bindings[0]
        assert isinstance(param, Param)
        owner = Function(site.module, param.function)
        for call, bound in self.model.graph.callers(owner):
            passed = self.model.graph.argument_for(call, owner, param, bound)
            if isinstance(passed, cst.Attribute) and passed.attr.value == "module" and any(
                    is_ddp(self.model, v) for v in self.model.values.at_call(call, passed.value)):
                return True
        return False

    def _returned_wraps(self) -> None:
        """`model = wrap_model(model, cuda).to(device)`: a project helper returns the DDP wrap
        (on its distributed path) and the caller moves what it gets back. Reported when the module
        the helper wraps was not moved before the wrap, as far as the model can follow it (a move
        of it that the model cannot see keeps the rule silent)."""
        model = self.model
        for call in model.root.calls:
            receiver = call.receiver
            if call.qualname is not None or call.method not in _MOVES or receiver is None:
                continue
            receiver = strip_moves(receiver)
            if not isinstance(receiver, cst.Call):
                continue
            for value in model.values.at_call(call, receiver):
                if value.call is None or not is_ddp(model, value):
                    continue
                made = value.module.call_at(value.call)
                if made is None or made.scope is call.scope or not self._unmoved_before(made, value):
                    continue
                self.report(call.node)
                break

    def _unmoved_before(self, wrap: CallSite, value: Value) -> bool:
        """The module `wrap` wraps is, everywhere the model can see, never moved before the wrap:
        not inside the call, not by what it is bound to, not by a `name.to(...)` statement
        before the wrap in the wrapping function or (for a parameter) in the caller."""
        inner = wrap.arg("module", 0)
        if inner is None or strip_moves(inner) is not inner:
            return False
        name = dotted(inner)
        if name is None:
            return False
        for leaf in self.model.values.of(value.module, inner, value.scope, value.frame, at=wrap.point):
            node = leaf.node
            if not isinstance(node, cst.BaseExpression) or isinstance(node, cst.Call) and strip_moves(node) is not node:
                return False
        for binding in wrap.scope.reaching(name, wrap.point):
            # `model = Net().cuda(gpu)`: the values the model reads are the module itself, the
            # move taken off, so the binding is read as written.
            if isinstance(binding, cst.Call) and strip_moves(binding) is not binding:
                return False
        if _moves_name_before(wrap.module, wrap.scope, name, wrap.index):
            return False
        frame = value.frame
        if frame is not None and frame.function.scope is wrap.scope:
            passed = frame.call.arg(name)
            bindings = wrap.scope.assignments.get(name, [])
            param = next((b for b in bindings if isinstance(b, Param)), None)
            shift = 0 if frame.bound == "" else 1  # a method's receiver is not in the call's arguments
            if param is not None and param.index is not None and passed is None and param.index >= shift:
                passed = frame.call.arg(name, param.index - shift)
            outer = dotted(passed) if passed is not None else None
            if outer is None or _moves_name_before(frame.call.module, frame.call.scope, outer, frame.call.index):
                return False
        return True

    def _moved_wrapper_expression(self, wrap: Wrap) -> cst.CSTNode | None:
        """`DDP(model).cuda()`: the wrap is the receiver of a move — unless the module was
        moved to the same device before it was wrapped (a move that moves nothing)."""
        for values in wrap.site.scope.assignments.values():
            for value in values:
                if (
                    isinstance(value, cst.Call)
                    and isinstance(value.func, cst.Attribute)
                    and value.func.value is wrap.site.node
                    and value.func.attr.value in _MOVES
                    and not self._already_there(wrap, value)
                ):
                    return value
        return None

    def _already_there(self, wrap: Wrap, move: cst.Call) -> bool:
        """The wrapped module was moved the same way before the wrap (`m = Net().to(device)` ...
        `DDP(m).to(device)`), also through calls that keep its device (`m =
        SyncBatchNorm.convert_sync_batchnorm(m)`): the move moves nothing."""
        name = wrap.inner_name
        if name is None or not isinstance(move.func, cst.Attribute):
            return False
        target = (move.func.attr.value, _args(wrap.site.module, move))
        if self._current_gpu(wrap.site.module, wrap.site.scope, move):
            target = _CURRENT_GPU
        return self._moved_to(wrap.site.scope, name, wrap.site.point, target, 3) \
            or self._moved_in_place(wrap, name, move, target)

    def _current_gpu(self, module: ModuleModel, scope: Scope, move: cst.Call) -> bool:
        """A move to the current CUDA device, however it is spelled: `.cuda()`, `.to("cuda")`,
        `.to(device)` with `device = torch.device("cuda")` (or `torch.device("cuda" if
        torch.cuda.is_available() else "cpu")`, whose CPU side is a machine without a GPU, where
        DDP on CUDA does not run at all). A device without an index is the current one."""
        if not isinstance(move.func, cst.Attribute):
            return False
        method = move.func.attr.value
        if method == "cuda" and not move.args:
            return True
        if method not in ("to", "cuda") or len(move.args) != 1 or move.args[0].star \
                or move.args[0].keyword is not None and move.args[0].keyword.value != "device":
            return False
        values = self.model.values.of(module, move.args[0].value, scope, None, depth=4)
        if method == "cuda":
            # `.cuda(torch.cuda.current_device())`: the index of the current device.
            return bool(values) and all(self._current_index(v) for v in values)
        return bool(values) and all(isinstance(v.node, cst.BaseExpression)
                                    and (self._plain_cuda(v) or self._current_index(v)) for v in values)

    def _current_index(self, value: Value) -> bool:
        """`torch.cuda.current_device()`: the index of the current CUDA device (a move to it,
        `.to(index)` or `.cuda(index)`, is a move to the current device)."""
        node = value.node
        return isinstance(node, cst.Call) and not node.args and self.model.resolver.qualname(
            value.module, node.func, value.scope) == "torch.cuda.current_device"

    def _plain_cuda(self, value: Value) -> bool:
        node = value.node
        if isinstance(node, cst.Call) and self.model.resolver.qualname(value.module, node.func, value.scope) \
                == "torch.device" and len(node.args) == 1 and node.args[0].keyword is None:
            node = node.args[0].value
        if isinstance(node, cst.IfExp) and isinstance(node.test, cst.Call) and not node.test.args \
                and self.model.resolver.qualname(value.module, node.test.func, value.scope) == "torch.cuda.is_available":
            node = node.body
        return isinstance(node, cst.SimpleString) and node.evaluated_value == "cuda"

    def _moved_in_place(self, wrap: Wrap, name: str, move: cst.Call, target: tuple[str, str]) -> bool:
        """`model = build(cfg)`, `model.to(device)` on every path to the wrap, then `DDP(model)`:
        a module moves in place, so a later `model.to(device)` (the same call, `device` not
        rebound in between) moves nothing."""
        module, scope = wrap.site.module, wrap.site.scope
        later = module.call_at(move)
        if later is None:
            return False
        made = [p.tick for p in scope.points.get(name, []) if p is not None and p.tick < wrap.site.point.tick]
        for site in module.calls[:wrap.site.index]:
            if site.scope is not scope or site.qualname is not None or site.method not in _MOVES \
                    or site.receiver is None or dotted(site.receiver) != name \
                    or not site.point.dominates(wrap.site.point):
                continue
            if (site.method, _args(module, site.node)) != target and not (
                    target == _CURRENT_GPU and self._current_gpu(module, scope, site.node)):
                continue
            if any(t > site.point.tick for t in made):
                continue  # a new module under that name after the move
            read = {dotted(n) for a in site.node.args for n in subexpressions(a.value)
                    if isinstance(n, (cst.Name, cst.Attribute))}
            if any(p is not None and site.point.tick < p.tick < later.point.tick
                   for n in read if n is not None for p in scope.points.get(n, [])):
                continue  # the device was chosen again in between
            return True
        return False

    def _moved_to(self, scope: Scope, name: str, point: Point, target: tuple[str, str], depth: int) -> bool:
        """Every binding of `name` that reaches `point` is the move `target` (or keeps the device
        of a module that was)."""
        module = self.model.root
        bindings = scope.reaching(name, point)
        if not bindings or depth <= 0:
            return False
        for binding in bindings:
            if not (isinstance(binding, cst.Call)):
                return False
            if isinstance(binding.func, cst.Attribute) and binding.func.attr.value in _MOVES:
                if (binding.func.attr.value, _args(module, binding)) != target and not (
                        target == _CURRENT_GPU and self._current_gpu(module, scope, binding)):
                    return False
                continue
            site = module.call_at(binding)
            first = site.arg("module", 0) if site is not None else None
            if site is None or self.model.api(site) != api.CONVERT_SYNC_BATCHNORM or dotted(first) != name:
                return False
            if not self._moved_to(scope, name, _binding_point(scope, name, binding) or site.point, target, depth - 1):
                return False
        return True

    def _rebound_between(self, wrap: Wrap, call: CallSite, name: str) -> bool:
        """Whether `name` gets a value other than the wrap between the wrap and `call`."""
        order = self._order(wrap)
        start, end = order.get(id(wrap.site.node), -1), order.get(id(call.node), -1)
        for value in wrap.site.scope.assignments.get(name, []):
            if not isinstance(value, cst.CSTNode) or value is wrap.site.node or strip_moves(value) is wrap.site.node:
                continue
            where = order.get(id(value), -1)
            if start < where < end:
                return True
        return False

    def _order(self, wrap: Wrap) -> dict[int, int]:
        """Source order of the nodes of the wrap's scope (a pre-order numbering, made once)."""
        memo = wrap.site.module.memo.setdefault("preorder", {})
        scope_node = wrap.site.scope.node
        cached: dict[int, int] | None = memo.get(id(scope_node))
        if cached is None:
            cached = {id(n): i for i, n in enumerate(_descendants(scope_node))}
            memo[id(scope_node)] = cached
        return cached


def _to_cpu(call: cst.Call) -> bool:
    """`x.to("cpu")`, `x.to(device="cpu")`, `x.to(torch.device("cpu"))`: a move that certainly
    leaves the GPU a DDP model lives on."""
    first = call.args[0].value if len(call.args) == 1 else None
    if isinstance(first, cst.Call) and dotted(first.func) in ("torch.device", "device") and len(first.args) == 1:
        first = first.args[0].value
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" \
        and isinstance(first, cst.SimpleString) and first.evaluated_value in ("cpu", b"cpu")


def _changes_layout(call: cst.Call) -> bool:
    """`x.to(memory_format=torch.channels_last)`: the parameters are replaced by tensors of
    another layout, under the gradient buckets DDP built for the old one."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" \
        and any(a.keyword is not None and a.keyword.value == "memory_format" for a in call.args)


def _moves_name_before(module: ModuleModel, scope: Scope, name: str, index: int) -> bool:
    """A move of `name` (`name.to(device)`, `name.cuda()`) in `scope` before call `index`."""
    for site in module.calls[:index]:
        if site.scope is scope and site.qualname is None and site.method in _MOVES \
                and site.receiver is not None and dotted(strip_moves(site.receiver)) == name:
            return True
    return False


def _binding_point(scope: Scope, name: str, value: cst.CSTNode) -> Point | None:
    """Where `name = value` happens in `scope`."""
    for bound, point in zip(scope.assignments.get(name, []), scope.points.get(name, [])):
        if bound is value:
            return point
    return None


def _args(module: ModuleModel, call: cst.Call) -> str:
    return ",".join(" ".join(module.code(a.value).split()) for a in call.args)


def _descendants(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node` and everything below it, in source (pre-)order."""
    out: list[cst.CSTNode] = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(children(current)))
    return out
