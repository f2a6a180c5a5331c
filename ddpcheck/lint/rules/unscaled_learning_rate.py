from __future__ import annotations

import functools
import re
from typing import Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.alternatives import one_per_value
from ddpcheck.lint.model.conditions import Resolve, is_rank_value
from ddpcheck.lint.model.ddp import unread_result
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ModuleModel, Param, Point, Scope
from ddpcheck.lint.model.syntax import dotted, expressions, inner_children, subexpressions
from ddpcheck.lint.model.values import Frame, Leaf, Value
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._loops import Loops
from ddpcheck.lint.traverse import NO_STATEMENTS

# A batch size or accumulation count divided by the number of ranks (`grad_accum //= world_size`,
# `batch_size // dist.get_world_size()`): the script holds the global batch fixed, so a constant
# learning rate is right.
# Also a batch name assigned a quotient by the number of ranks (`batch_size = 64 // WORLD_SIZE`).
# The divisor may be a product that holds the number of ranks (`total // (batch * seq_len *
# world_size)`), and the batch an entry of an options dict (`opts["batch_size"] // n_gpus`).
_WORLD_DIVISOR = (
    r"(?:[\w.]+\s*\*\s*)*"
    r"(?:[\w.]*(?:world_size|ngpus_per_node|gpus_per_node|num_gpus|n_gpus?|ngpus|nprocs|num_replicas)\b"
    r"|[\w.]*get_world_size\(\))"
)
_DIVIDES_BY_WORLD = re.compile(
    r"(?:batch|accum|micro)\w*(?:['\"]\])?\)?\s*//?=?\s*\(?\s*" + _WORLD_DIVISOR
    + r"|(?:batch|accum|micro)\w*\s*=\s*(?:int\()?[\w.]+\s*//?\s*\(?\s*" + _WORLD_DIVISOR,
    re.I,
)
# Names whose value is (or is derived from) the number of ranks or the global batch.
WORLD_SIZE_NAME = re.compile(
    r"world_size|world|num_replicas|n_?replicas|global_batch|total_batch|effective_batch|eff_batch"
    r"|nprocs|num_processes|n_?procs|^n_?gpus?$|num_gpus|ngpus|gpus_per_node|num_nodes|nnodes",
    re.I,
)
_DEPTH = 4


class UnscaledLearningRate(Rule):
    """An optimizer in a DDP script gets a hard-coded learning rate that ignores the world size.

    ## Why it matters
    With DDP each rank takes its own batch, so one optimizer step consumes
    `batch_size × world_size` samples: the global batch grows with the number of GPUs while the
    learning rate stays what it was on one GPU. Training takes N× fewer steps per epoch at the
    same step size; users see a job on 8 GPUs converge more slowly per epoch, and reach a worse
    final accuracy, than the single-GPU run they started from. The linear scaling rule (Goyal et
    al., 2017) keeps the per-sample progress: `lr = base_lr × global_batch / base_batch`, usually
    with a few epochs of warm-up. (Adaptive optimizers such as Adam are often scaled by the square
    root instead; either way the learning rate should be a decision about the global batch.)

    Reported only where the value is visibly a constant — a number literal, a name assigned
    only from number literals, an entry the script itself sets to one (`cfg["lr"] = 1e-3`
    after `cfg = load_config()`), or an attribute of a plain settings class of the script
    (`class TrainConfig: lr = 5e-5`, `cfg = TrainConfig()`, or read on the class itself,
    `TrainConfig.lr`, where nothing assigns it; a dataclass made with the field left to its
    default, `TrainConfig()`, where the class is only called or named in annotations — not
    handed to a command-line binder that fills its defaults, `HfArgumentParser(TrainConfig)` —
    and nothing writes the field; not a class whose attributes the script sets by name) or of an
    attribute dict the script fills with literals (`cfg = EasyDict({"emb_size": 768})`,
    `SimpleNamespace(lr=1e-3)`), also inside arithmetic (`cfg.emb_size ** -0.5`, a Noam rate) — and nothing in it or in the names it comes from mentions the
    world size (`get_world_size()`, `WORLD_SIZE`, `world_size`, `ngpus`, a global batch size).
    Optimizers of other libraries built the same way (Hugging Face's `AdamW`, bitsandbytes'
    8-bit Adam, apex's fused optimizers) are read like torch's. The `lr` of each parameter group (`[{"params": head, "lr": 1e-4}, ...]`) is a rate of its
    own and is read the same way. A learning rate read from the command line, a config file
(also a project settings module: `from config import *`, `configs/train_cfg.py`, a module that
defines no function or class, only values),
    the environment or a function parameter is a deliberate choice and is not reported — also an
    entry of a defaults dict that the script hands to a project function writing the entries of
    that parameter (`update_args(args, cmd_args)` copying the parsed options in) —; neither is an optimizer left at its
    default `lr`, nor a script that holds the global batch fixed by dividing by the world size
    (`grad_accum_steps //= world_size`, `batch_size // dist.get_world_size()`, nanoGPT-style;
    not a batch split over the GPUs of one node, `128 / args.ngpus`, in a script whose world
    is several nodes of them, `args.world_size = args.ngpus * args.nodes`),
    — also a batch divided by a product that holds the world size (`total // (batch * seq_len *
    world_size)`) or an options entry divided by the GPUs (`opts["batch_size"] // n_gpus`) —
    nor a default of a function whose parameters a config file binds (`@gin.configurable`),
    nor a rate handed on with the optimizer to a call that also takes a value computed from the
    world size (`Warmup(optimizer, world_size * batch / 256)`) — a count of steps that mentions
    it, passed by a keyword or to a parameter named for steps or under such a name
    (`cosine_lr(optimizer, lr, warmup, total_steps)` with `total_steps = len(loader) * epochs`),
    is a schedule's length and scales nothing —,
    nor an optimizer bound to a local name that nothing reads in a function that runs backward
    passes (`optimizer = SGD(model.parameters(), lr=0.1)` in a benchmark that only times
    `loss.backward()`): it is never stepped, so no rate is applied,
    nor an optimizer made anew for each batch of a DataLoader, in the loop over it or in a
    project function called from there (`for batch in loader: scene.align(lr=0.01)` where
    `align` fits the scene's own parameters with an Adam of its own): it fits that batch alone,
    on one rank, and the global batch says nothing about its rate,
    nor `lr=0`, a placeholder that a schedule overwrites every step, nor `lr=1.0` under a
    `LambdaLR`, whose lambda then returns the rate itself. A literal passed into the
    project function that builds the optimizer (`build_optimizer(model, lr=0.01)`) is reported
    where it is written (at each, where several calls pass their own). A schedule that sets the rate from a peak of its own
    (`OneCycleLR(optimizer, max_lr=5e-4)`, `CyclicLR`'s `max_lr`) overrides what the optimizer
    was given: a constant peak is reported at the peak, read the same way (once per optimizer:
    at the optimizer when its own rate is a constant too), and under a peak that is not a
    constant (`max_lr=args.max_lr`) the optimizer's own rate is not reported.
    A schedule handed the optimizer with a count of steps (`total_steps=...`, a name such as
    `total_steps`, or a number computed from `len(loader)`) does not scale the rate, even when
    that count depends on the world size through the loader's sampler.
    One optimizer built one way or another in the arms of one `if` chain (`if args.model_type ==
    "A": optimizer = Adam(..., lr=2e-4)` / `else: optimizer = AdamW(..., lr=1e-3)`, both bound to
    the same name) is reported once: in the arm the command line's defaults take, else the first.
    Severity is info: a rate tuned for the global batch at a fixed world
    size is fine, and this rule cannot know that.

    ## How to fix
    Scale by the world size: `lr = base_lr * dist.get_world_size()` (equivalently
    `base_lr * global_batch / base_batch`), or make the learning rate a command-line or config
    value tuned for the global batch.

    ## References
    - https://arxiv.org/abs/1706.02677 (Goyal et al., Accurate, Large Minibatch SGD)
    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://github.com/pytorch/examples/blob/main/imagenet/main.py
    """

    code = "DDP004"
    name = "unscaled-learning-rate"
    severity = Severity.INFO
    MESSAGE = (
        "learning rate is a constant that ignores the world size: with N ranks the global batch is "
        "N× larger; scale it by the linear scaling rule lr = base_lr × global_batch / base_batch "
        "(e.g. `base_lr * dist.get_world_size()`) or read it from the command line or config"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        """,
        """
        # Through names: the rate comes from the global batch.
        import os
        from torch.optim import AdamW
        from torch.nn.parallel import DistributedDataParallel as DDP
        world_size = int(os.environ["WORLD_SIZE"])
        base_lr, base_batch = 0.1, 256
        global_batch = 64 * world_size
        lr = 0.1 * global_batch / 256
        opt = AdamW(DDP(model).parameters(), lr=lr)
        """,
        """
        # From the command line, a config, or a parameter: a deliberate choice.
        import argparse
        import torch
        import torch.distributed as dist
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.01)
        args = parser.parse_args()
        dist.init_process_group("gloo")
        a = torch.optim.SGD(params, lr=args.lr)
        b = torch.optim.Adam(params, lr=config["optim"]["lr"])
        def build(params, lr=0.01):
            return torch.optim.SGD(params, lr=lr)
        """,
        """
        # The environment variable, read in a helper name.
        import os, torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        scaled = 0.01 * float(os.environ.get("WORLD_SIZE", 1))
        opt = torch.optim.SGD(params, scaled)
        """,
        """
        # Not a DDP script.
        import torch
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        """,
        """
        # The global batch is held fixed: fewer accumulation steps per rank.
        import os, torch
        ddp_world_size = int(os.environ["WORLD_SIZE"])
        torch.distributed.init_process_group("nccl")
        gradient_accumulation_steps = 40
        gradient_accumulation_steps //= ddp_world_size
        learning_rate = 6e-4
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            """,
            lines=(4,),
        ),
        Invalid(
            """
            # A positional rate through a constant name, a deep import path.
            from torch.optim.adamw import AdamW as Opt
            from torch.nn.parallel import DistributedDataParallel as DDP
            LR = 3e-4
            model = DDP(model)
            opt = Opt(model.parameters(), LR)
            """,
            lines=(6,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        sites = list(model.paths.sites())
        modules = {id(s.module): s.module for s in sites}
        if any(_divides_batch_by_world(code_only(m.source)) for m in modules.values()):  # not a commented-out line
            return
        if any(self._splits_steps_by_rank(m) for m in modules.values()):
            return
        self._loops = Loops(model)
        reported: set[int] = set()  # the optimizers reported
        found: dict[CallSite, tuple[cst.CSTNode, list[Value]]] = {}
        for site in sites:
            name = model.api(site)
            if name == api.ZERO_OPTIMIZER:
                lr = site.arg("lr")
            elif model.builds_optimizer(site):
                lr = site.arg("lr", 1)
            else:
                continue
            if any(c.scope is site.scope and c.method == "backward"
                   for c in site.module.calls_in(site.scope.qualname)) and unread_result(site):
                continue  # the function trains without it (never stepped): its rate is applied to nothing
            if self._group_rates(site, sites):
                continue  # one finding per optimizer: its rates share the one cause
            if self._built_per_batch(site):
                continue  # a fit of its own for each batch (a test-time or alignment optimizer)
            if lr is not None:
                values = model.values.at_call(site, lr)
            else:  # `Opt(params, **optimizer_args)`: the rate, if any, is an entry of the dict
                values = model.values.keyword(site, "lr", 1)
                if not values:
                    continue  # the optimizer's default
            where: cst.CSTNode = lr if lr is not None else site.node
            if not values or not all(self._constant(v, _DEPTH) for v in values):
                continue
            if self._mentions_world(site.module, where, site.scope, None, site.point, _DEPTH) or any(
                    self._mentions_world(v.module, v.node, v.scope, v.frame, v.at, _DEPTH) for v in values
                    if isinstance(v.node, cst.CSTNode)):
                continue
            if all(_is_zero(v.node) for v in values):
                continue  # a placeholder the schedule overwrites every step
            if all(_is_one(v.node) for v in values) and self._rate_from_lambda(site, sites):
                continue  # `lr=1.0` under a LambdaLR: the lambda's return is the rate
            if self._scaled_by_another_call(site, sites) or self._peak_set_by_schedule(site, sites):
                continue
            passed = [v for v in values if lr is not None and self._through_parameter(site, lr)
                      or model.values.default_in_use(v)]
            reported.add(id(site.node))
            found[site] = (where, passed)
        # One optimizer built one way or another in the arms of one `if` chain is one optimizer.
        for site in one_per_value(list(found)):
            where, passed = found[site]
            written = list({id(v.node): v for v in passed if isinstance(v.node, cst.CSTNode)}.values())
            if written:
                # The literal is passed in by a caller (`build_optimizer(model, lr=0.01)`):
                # report where it is written — each one where callers pass their own
                # (`build(gen, lr=cfg.gen_lr)` and `build(disc, lr=cfg.disc_lr)`).
                for value in written:
                    assert isinstance(value.node, cst.CSTNode)
                    self.report(value.node, module=value.module, related=[site])
            else:
                self.report(where, module=site.module, related=model.paths.chain(site))
        self._cycle_rates(sites, reported)

    def _peak_set_by_schedule(self, optimizer: CallSite, sites: list[CallSite]) -> bool:
        """The optimizer is handed to a schedule that sets the rate from a peak of its own that
        is not a constant (`OneCycleLR(optimizer, max_lr=args.max_lr)`): the rate it was built
        with is not the one it trains with. (Under a constant peak the one finding stays at
        the optimizer.)"""
        model = self.model
        for site in sites:
            position = _CYCLE_PEAK.get(self._schedule(site) or "")
            held = site.arg("optimizer", 0) if position is not None else None
            if held is None or not any(v.node is optimizer.node for v in model.values.at_call(site, held)):
                continue
            values = model.values.keyword(site, "max_lr", position)
            if not values or not all(self._constant(v, _DEPTH) for v in values):
                return True
        return False

    def _schedule(self, site: CallSite) -> str | None:
        """The API a call makes, also through a class a settings object holds
        (`config.SchedulerClass(optimizer, **config.scheduler_params)` with `SchedulerClass =
        torch.optim.lr_scheduler.OneCycleLR` in the class body)."""
        name = self.model.api(site)
        if name is not None or not isinstance(site.node.func, cst.Attribute):
            return name
        held = {self.model.qualname(v.module, v.node, v.scope) for v in self.model.values.at_call(site, site.node.func)
                if isinstance(v.node, (cst.Name, cst.Attribute))}
        return held.pop() if len(held) == 1 else None

    def _cycle_rates(self, sites: list[CallSite], reported: set[int]) -> None:
        """A schedule that sets the rate itself from its own peak (`OneCycleLR(opt, max_lr=5e-4)`,
        `CyclicLR(opt, base_lr, max_lr)`): whatever the optimizer was given, the peak is the
        rate it trains with, reported as the optimizer's is (once per optimizer)."""
        model = self.model
        for site in sites:
            position = _CYCLE_PEAK.get(model.api(site) or "")
            if position is None:
                continue
            peak = site.arg("max_lr", position)
            held = site.arg("optimizer", 0)
            if peak is None or held is None:
                continue
            optimizers = model.values.at_call(site, held)
            if any(id(v.node) in reported for v in optimizers):
                continue
            values = model.values.at_call(site, peak)
            if not values or not all(self._constant(v, _DEPTH) for v in values) or all(_is_zero(v.node) for v in values):
                continue
            if self._mentions_world(site.module, peak, site.scope, None, site.point, _DEPTH) or any(
                    self._mentions_world(v.module, v.node, v.scope, v.frame, v.at, _DEPTH) for v in values
                    if isinstance(v.node, cst.CSTNode)):
                continue
            reported.update(id(v.node) for v in optimizers)
            self.report(peak, module=site.module, related=model.paths.chain(site))

    def _splits_steps_by_rank(self, module: ModuleModel) -> bool:
        """A training loop (a loop that calls `backward()`) that takes each rank's slice of one
        batch (`target[bounds[rank]:bounds[rank + 1]]`, `rays[rank * n:(rank + 1) * n]`): the
        global batch is split across the ranks and does not grow with the world size."""
        resolve = self.model.resolver_for(module)
        # Only the outermost loops: a loop's body holds every loop inside it, so an inner loop
        # that qualifies makes its outer loop qualify too.
        stack: list[cst.CSTNode] = [module.tree]
        while stack:
            node = stack.pop()
            if type(node) in NO_STATEMENTS:
                continue  # no loop below
            if not isinstance(node, (cst.For, cst.While)):
                stack.extend(inner_children(node))  # a token holds no loop
                continue
            if node.orelse is not None:
                stack.append(node.orelse)
            # Calls and subscripts are never tokens nor below one: the tokens are not read.
            backward = False
            subscripts: list[cst.CSTNode] = []
            for n in expressions(node.body):
                kind = type(n)
                if kind is cst.Call:
                    func = n.func  # type: ignore[attr-defined]
                    if type(func) is cst.Attribute and func.attr.value == "backward":
                        backward = True
                elif kind is cst.Subscript:
                    subscripts.append(n)
            if backward and any(_rank_slice(n, resolve) for n in subscripts):
                return True
        return False

    def _group_rates(self, site: CallSite, sites: list[CallSite]) -> bool:
        """Report the first constant rate of the parameter groups the optimizer gets as a list of
        dicts (`[{"params": head, "lr": 1e-4}, ...]`): each group's rate is its own `lr`, and the
        optimizer is reported once, however many of its groups set a constant. True if reported."""
        model = self.model
        params = site.arg("params", 0)
        if params is None:
            return False
        for held in model.values.at_call(site, params):
            if not isinstance(held.node, (cst.List, cst.Tuple)):
                continue
            for element in held.node.elements:
                if isinstance(element, cst.StarredElement):
                    continue
                for group in model.values.of(held.module, element.value, held.scope, held.frame, at=held.at):
                    if not isinstance(group.node, cst.Dict):
                        continue
                    for entry in group.node.elements:
                        if isinstance(entry, cst.DictElement) and isinstance(entry.key, cst.SimpleString) \
                                and entry.key.evaluated_value == "lr":
                            if self._group_rate(site, sites, group, entry.value):
                                return True
        return False

    def _group_rate(self, site: CallSite, sites: list[CallSite], group: Value, rate: cst.BaseExpression) -> bool:
        values = self.model.values.of(group.module, rate, group.scope, group.frame, at=group.at)
        if not values or not all(self._constant(v, _DEPTH) for v in values):
            return False
        if self._mentions_world(group.module, rate, group.scope, group.frame, group.at, _DEPTH) or any(
                self._mentions_world(v.module, v.node, v.scope, v.frame, v.at, _DEPTH) for v in values
                if isinstance(v.node, cst.CSTNode)):
            return False
        if all(_is_zero(v.node) for v in values):
            return False
        if all(_is_one(v.node) for v in values) and self._rate_from_lambda(site, sites):
            return False
        self.report(rate, module=group.module, related=[site])
        return True

    def _scaled_by_another_call(self, optimizer: CallSite, sites: list[CallSite]) -> bool:
        """Another call takes the optimizer together with a value computed from the world size
        (`Warmup(optimizer, scale=world_size * batch / 256)`): the rate is scaled there. A count of
        steps or epochs that mentions the world size (`total_steps=len(data) // world_size`)
        does not scale the rate."""
        for site in sites:
            args = site.node.args
            if site.node is optimizer.node or len(args) < 2:
                continue
            counts = self._count_parameters(site)
            scaled = [a for a in args if not _counts(a) and not any(a.value is passed for passed in counts)
                      and self._arithmetic(site, a.value)
                      and self._mentions_world(site.module, a.value, site.scope, None, site.point, _DEPTH)]
            if not scaled:
                continue
            for arg in args:
                if arg not in scaled and isinstance(arg.value, (cst.Name, cst.Attribute)) and any(
                        v.node is optimizer.node for v in self.model.values.at_call(site, arg.value)):
                    return True
        return False

    def _count_parameters(self, site: CallSite) -> list[cst.BaseExpression]:
        """The arguments `site` passes, by position too, to parameters of a project function
        named for a count of steps (`def cosine_lr(optimizer, base_lr, warmup_length,
        total_steps)`): a schedule's length, not a scale of the rate."""
        graph = self.model.graph
        found: list[cst.BaseExpression] = []
        for callee, bound in graph.targets(site):
            for bindings in callee.scope.assignments.values():
                for param in bindings:
                    if isinstance(param, Param) and _COUNT_KEYWORD.search(param.name):
                        passed = graph.argument_for(site, callee, param, bound)
                        if isinstance(passed, cst.BaseExpression):
                            found.append(passed)
        return found

    def _arithmetic(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """A number computed in place or in a name (`world_size * batch / 256`, `factor`): what a
        scale is; a loader or a model handed on with the optimizer is not."""
        if isinstance(expr, cst.BinaryOperation):
            return True
        if not isinstance(expr, cst.Name):
            return False
        values = self.model.values.at_call(site, expr)
        return bool(values) and all(isinstance(v.node, cst.BinaryOperation) for v in values)

    def _rate_from_lambda(self, optimizer: CallSite, sites: list[CallSite]) -> bool:
        """A LambdaLR is built on the optimizer `optimizer` makes: with a base rate of 1 the
        lambda's return (`base_lr * lmbda(self.last_epoch)` in torch's LambdaLR.get_lr) is the rate."""
        for site in sites:
            if self.model.api(site) != _LAMBDA_LR:
                continue
            held = site.arg("optimizer", 0)
            if held is not None and any(v.node is optimizer.node for v in self.model.values.at_call(site, held)):
                return True
        return False

    def _built_per_batch(self, site: CallSite) -> bool:
        """The optimizer is made anew for each batch of a DataLoader: built in a loop over one,
        or in a project function called from such a loop, directly or through a few calls
        (`for batch in loader: scene.align(lr=0.01)` where `align` builds an Adam over the
        scene's own parameters and runs its steps). It fits something of that batch alone, a
        step the other ranks never share, so the global batch says nothing about its rate. Only
        an optimizer bound to a local name of its function and not returned: one kept on an
        object or handed back may be made once, at the first step, and trained with after."""
        scope = site.scope
        if scope.kind != "function":
            return False
        local = [n for n, bound in scope.assignments.items() if "." not in n and any(b is site.node for b in bound)]
        returned = site.module.returns.get(scope.qualname, [])
        if not local or any(isinstance(sub, cst.Name) and sub.value in local
                            for r in returned for sub in subexpressions(r)):
            return False  # kept or handed back (`self.optimizer = ...` made at the first step): made once
        graph, paths = self.model.graph, self.model.paths
        frontier = [site]
        seen: set[int] = set()
        for _ in range(_DEPTH):
            above: list[CallSite] = []
            for call in frontier:
                if id(call.node) in seen:
                    continue
                seen.add(id(call.node))
                for fs in call.module.fors:
                    if fs.node in call.loops and fs.scope is call.scope and self._loops.iterates_batches(
                            call.module, fs.node.iter, fs.scope, fs.point):
                        return True
                function = paths.function_of(call)
                if function is not None:
                    above += [caller for caller, _ in graph.callers(function)]
            frontier = above
            if not frontier:
                break
        return False

    def _through_parameter(self, site: CallSite, lr: cst.BaseExpression) -> bool:
        """The rate is a parameter of the function that builds the optimizer."""
        name = dotted(lr)
        return name is not None and any(isinstance(b, Param) for b in site.scope.reaching(name, site.point))

    def _constant(self, value: Value, depth: int) -> bool:
        """Built only from number literals, directly or through names every one of whose
        values is itself constant: `0.01`, `1e-3 * 2`, `lr` after `lr = 0.1`. A parameter nobody
        passes, an attribute (`args.lr`), a call or a subscript (`cfg["lr"]`) is not."""
        if self.model.values.default_in_use(value) is False:
            return False  # a default no caller of the run relies on: the signature's choice
        if value.module is not self.model.root and _settings_module(value.module):
            return False  # a settings file of the project (`config.py`): the user's choice, as a YAML file is
        return self._constant_expr(value.module, value.node, value.scope, value.frame, value.at, depth)

    def _constant_expr(self, module: ModuleModel, node: Leaf, scope: Scope, frame: Frame | None, at: Point | None,
                       depth: int) -> bool:
        if isinstance(node, (cst.Integer, cst.Float)):
            return True
        if isinstance(node, cst.UnaryOperation):
            return self._constant_expr(module, node.expression, scope, frame, at, depth)
        if isinstance(node, cst.BinaryOperation):
            return self._constant_expr(module, node.left, scope, frame, at, depth) and \
                self._constant_expr(module, node.right, scope, frame, at, depth)
        if isinstance(node, (cst.Name, cst.Attribute)) and depth > 0:
            # (`cfg.emb_size ** -0.5` of an attribute dict the script fills with literals)
            values = self.model.values.of(module, node, scope, frame, at=at)
            return bool(values) and all(v.node is not node and self._constant(v, depth - 1) for v in values)
        return False

    def _mentions_world(self, module: ModuleModel, node: cst.CSTNode, scope: Scope, frame: Frame | None,
                        at: Point | None, depth: int) -> bool:
        """Whether `node`, or a name it is computed from, involves the number of ranks:
        `get_world_size()`, `os.environ["WORLD_SIZE"]`, `world_size`, `args.ngpus`, a global batch."""
        for sub in subexpressions(node):
            if isinstance(sub, cst.SimpleString) and sub.evaluated_value in api.WORLD_SIZE_ENV:
                return True
            if isinstance(sub, cst.Call):
                q = self.model.qualname(module, sub.func, scope)
                if q in api.WORLD_SIZE_CALLS or (dotted(sub.func) or "").rsplit(".", 1)[-1] in (
                        "get_world_size", "device_count", "num_processes"):
                    return True
                continue
            if isinstance(sub, (cst.Name, cst.Attribute)):
                name = dotted(sub)
                if name is None:
                    continue
                if WORLD_SIZE_NAME.search(name.rsplit(".", 1)[-1]):
                    return True
                if depth > 0 and isinstance(sub, cst.Name):
                    for value in self.model.values.of(module, sub, scope, frame, at=at):
                        if value.node is not sub and isinstance(value.node, cst.CSTNode) and \
                                self._mentions_world(value.module, value.node, value.scope, value.frame, value.at, depth - 1):
                            return True
        return False


# Keywords of a scheduler that count steps rather than scale the rate.
_COUNT_KEYWORD = re.compile(r"step|epoch|iter|total|len|num_", re.I)
_LAMBDA_LR = "torch.optim.lr_scheduler.LambdaLR"
# Schedules that set the rate from a peak of their own, and the peak's position.
_CYCLE_PEAK = {"torch.optim.lr_scheduler.OneCycleLR": 1, "torch.optim.lr_scheduler.CyclicLR": 2}


# A project module named for settings: `config.py`, `configs/train_cfg.py`, `hparams.py`, `options.py`.
_SETTINGS_WORDS = frozenset({
    "conf", "config", "configs", "configuration", "cfg", "cfgs", "setting", "settings", "hparams", "hparam",
    "hyperparams", "hyperparameters", "params", "options", "opts", "constants", "consts"})


def _settings_module(module: ModuleModel) -> bool:
    """A project module the user edits to choose a run's values, as they would a YAML file: it is
    named for settings, or it defines no function and no class (names bound to values only)."""
    parts = module.path.replace("\\", "/").split("/")
    if any(word in _SETTINGS_WORDS for part in parts[-2:]
           for word in re.split(r"[_\-.]", part.removesuffix(".py").lower())):
        return True
    return not module.functions and not module.classes


def _counts(arg: cst.Arg) -> bool:
    """An argument of a scheduler that counts steps rather than scales the rate: by its keyword
    (`total_steps=...`), by the name it passes (`cosine_lr(opt, lr, warmup, total_steps)`), or
    computed from a length (`len(loader) * epochs`, the batches per rank)."""
    if arg.keyword is not None:
        return bool(_COUNT_KEYWORD.search(arg.keyword.value))
    name = dotted(arg.value)
    if name is not None:
        last = name.rsplit(".", 1)[-1]
        return bool(_COUNT_KEYWORD.search(last)) and not WORLD_SIZE_NAME.search(last)  # not `total_batch`
    return any(isinstance(sub, cst.Call) and dotted(sub.func) == "len" for sub in subexpressions(arg.value))


@functools.lru_cache(maxsize=64)  # asked of the reached project modules' texts for every file
def _divides_batch_by_world(text: str) -> bool:
    """The global batch split by the world size (`batch_size // world_size`, `accum_steps //=
    get_world_size()`); not a batch size that is itself a divisor of something else
    (`len(data) / self.batch_size / self.num_replicas` counts batches per rank)."""
    for m in _world_divisions(text):
        before = re.sub(r"[\w.]*$", "", text[:m.start()]).rstrip()
        if not before.endswith("/") and not _per_node(text, m.group(0)):
            return True
    return False


_PER_NODE_COUNT = re.compile(r"(?:ngpus_per_node|gpus_per_node|n_?gpus?|num_gpus|nprocs)$", re.I)
_NODE_COUNT = r"[\w.]*(?:nodes|world_size)\b"


def _per_node(text: str, division: str) -> bool:
    """The batch is divided by the GPUs of one node (`128 / args.ngpus`) in a script that
    makes the world size a multiple of it (`args.world_size = args.ngpus * args.nodes`): the
    global batch still grows with the nodes."""
    divisor = re.search(r"[\w.]+$", division)
    if divisor is None or not _PER_NODE_COUNT.search(divisor.group(0)):
        return False
    name = re.escape(divisor.group(0))
    return re.search(rf"(?<![\w.]){name}\s*\*\s*{_NODE_COUNT}|{_NODE_COUNT}\s*\*\s*{name}\b", text) is not None


def _world_divisions(text: str) -> Iterator[re.Match[str]]:
    """`_DIVIDES_BY_WORLD.finditer(text)`. Every match starts with one of its three words, and
    the case-insensitive pattern, tried at every character, is slow: on ASCII text (where
    lowering is exactly IGNORECASE) it is tried only where a word starts."""
    if not text.isascii():
        yield from _DIVIDES_BY_WORLD.finditer(text)
        return
    lower = text.lower()
    starts: list[int] = []
    for word in ("batch", "accum", "micro"):
        at = lower.find(word)
        while at >= 0:
            starts.append(at)
            at = lower.find(word, at + 1)
    end = 0
    for at in sorted(starts):
        if at < end:
            continue
        m = _DIVIDES_BY_WORLD.match(text, at)
        if m is not None:
            yield m
            end = m.end()


def _is_one(node: object) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.evaluated_value) == 1.0


def _is_zero(node: object) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.evaluated_value) == 0.0



def _rank_slice(node: cst.CSTNode, resolve: Resolve) -> bool:
    """`x[a:b]` whose bounds both read the rank: one rank's share of `x`."""
    if not (isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice)):
        return False
    part = node.slice[0].slice
    if part.lower is None or part.upper is None or part.step is not None:
        return False
    return all(any(isinstance(n, cst.BaseExpression) and is_rank_value(n, resolve) for n in subexpressions(bound))
               for bound in (part.lower, part.upper))
