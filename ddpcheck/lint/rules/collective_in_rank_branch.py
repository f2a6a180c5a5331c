from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import exclusive_arms, selects_main_rank
from ddpcheck.lint.model.ddp import is_ddp
from ddpcheck.lint.model.module import Augmented, CallSite, Guard, ModuleModel, Point, Scope
from ddpcheck.lint.model.paths import is_no_grad
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import dotted, subexpressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._forwards import DdpForwards


@dataclass(frozen=True)
class _Candidate:
    call: CallSite
    guard: Guard
    what: str  # the callee as written: dist.barrier, reduce_tensor, model
    kind: str  # "collective", "helper" or "forward"
    key: str  # what is called, however it is spelled


class CollectiveInRankBranch(Rule, DdpForwards):
    """A collective (or a DDP forward) runs only under a rank condition: the other ranks never join and the job hangs.

    ## Why it matters
    Collectives — `all_reduce`, `barrier`, `broadcast`, `all_gather`, `reduce`, `gather`,
    `scatter`, `all_to_all`, `new_group`... — complete only when every rank of the group calls
    them. Under `if rank == 0:` rank 0 waits for partners that never arrive (or the others wait
    at the next collective for a rank 0 that is somewhere else). Users see the job freeze with
    GPUs at 100% or 0%, no error, until the NCCL watchdog kills it after its timeout (10 minutes
    by default, 30 in older versions) with `Watchdog caught collective operation timeout`.
    The forward pass of a `DistributedDataParallel` model is a collective too: it broadcasts
    buffers (BatchNorm statistics) from rank 0, so evaluating the DDP model on rank 0 only hangs
    — even under `torch.no_grad()`.

    Reported for such calls (and for the collectives of MPI communicators — `MPI.COMM_WORLD.bcast`
    — and of Horovod), for a call of the DDP-wrapped model (also through an outside function
    that runs a forward of the module it is handed: a model summary, `torchsummary.summary(model,
    (3, 224, 224))`, or a FLOP count, `thop.profile(model, inputs=(x,))`; torchinfo's
    `summary(model)` with no input runs none; also a function of the project that runs the DDP
    model its module's top-level code binds, `estimate_loss()` calling the global `model`, where the
    network is one of the project's known to make buffers), and for calls of functions and
    methods of the project that perform one, however deep, when they sit under a rank condition
    (`if rank == 0`, `if dist.get_rank() == 0`, `if is_main_process()`,
    `if local_rank in (-1, 0)`, the statements after `if rank != 0: return`, `if evaluator is not
    None` where the evaluator is built under `if local_rank == 0:` and set to None in its `else`,
    also combined with `&`: `(evaluator is not None) & (epoch % k == 0)`...). Also reported:
    a loop around a collective whose count is set only on rank 0 (`n = 0`, then `if rank == 0:
    n = len(keys)`, then `for i in range(n): dist.broadcast(...)`), so rank 0 runs the collective
    a different number of times than the others; the count read back from a broadcast is fine,
    and so is a count set again under the rank guard to the value every rank already has
    (`epochs = opt.epochs`, then `if rank in (-1, 0): epochs = opt.epochs` on a resume path).
    Also reported: a collective, or a project function that makes one, under an `if` on a
    value each rank computes on its own, its unreduced training loss (`if avg_loss < best_loss:
    save_checkpoint(state, path, rank)` whose helper waits in a barrier, with `avg_loss =
    np.mean(epoch_losses)` of the `loss.item()` values appended in a loop that back-propagates
    and makes no collective, or a `total += loss.item()` divided by a count): the ranks whose
    loss did not improve skip the collective; the same call in the `else:` balances it.
    The same collective or helper called again in the next statement of one branch (`if rank
    == 0: a = reduce(x)`, then `b = reduce(y)`) is one action, reported once, at its first
    call; calls with other work between them (a barrier before and after a rank-0
    evaluation), different calls, and the calls after an early exit (`if rank != 0: return`)
    are each reported.
    Not reported:
    balanced code, where the same collective also runs on the other side (the `else` branch, or
    a complementary condition in the same function, as in the `torch_distributed_zero_first`
    context manager, or the same call later in the function on the ranks that stayed: `if not
    use_ddp and rank != 0: dist.barrier(); return`, then `dist.barrier()` at the end); guards that only ask whether the run is distributed (`if ddp:`,
    `if world_size > 1`, `if dist.is_initialized()`), which every rank answers alike; a DDP
    forward in a helper's branch that the call's arguments rule out (`synthesize(model, text)`
    whose `if backend == "tf": model(x)` the default `backend="torch"` never takes); a rank-0
    forward of a project network with no buffers to broadcast (no norm layer with running
    statistics, no `register_buffer`, in its own code or in the project submodules handed to its
    constructor, `Renderer(encoder=PositionalEncoding(n))`; timm's `DropPath`/`trunc_normal_` helpers add none, nor
    does a timm vision transformer it builds, `timm.create_model("vit_small_patch16_224")`, nor
    do layers that are only named for a network, `self.resnet_conv_first` — 
    read from the code of the network's class, its project bases and the classes of its file
    that it names, so a BatchNorm head class written beside a LayerNorm encoder does not count
    for the encoder; a causal-mask buffer registered only under `if not self.flash:` with
    `self.flash = hasattr(F, "scaled_dot_product_attention")`, for PyTorch before 2.0, is never
    made; a `torch.compile`d network holds the buffers of the one it is given), or, under `torch.no_grad()` (with gradients on, DDP's forward may rebuild
    its buckets, a broadcast from rank 0), of a stack of torch's own layers that keep none (`nn.Sequential(nn.Linear(10, 64), nn.ReLU(),
    nn.Linear(64, 2))`; a layer of another library counts as holding some), nor under
    `torch.no_grad()` when the last forward of that wrapper before it, on its process, also ran
    under no_grad (DDP broadcasts buffers only at the first forward after one with gradients on:
    a rank-0 `trainer.test()` after a `train()` whose every epoch ends with a validation on every
    rank sends nothing; a validation only some epochs run, or a training forward last, still
    counts); a
    call under a further test that holds only outside a distributed run (`if args.local_rank ==
    -1: evaluate(...)` inside the rank-0 block); collectives under a test no run passes — such
    as `if args.local_rank not in [-1, 0] and not evaluate:` where `evaluate` is a function of
    the module, so always true — which neither count at the call nor make a helper that holds
    them one that performs a collective.

    ## How to fix
    Call the collective on every rank, outside the branch, and keep only the rank-0 work (logging,
    saving) inside it. To evaluate on rank 0 only, call the inner module:
    `model.module(inputs)`. To make other ranks wait for rank 0, put `dist.barrier()` after the
    branch, on every rank.

    ## References
    - https://pytorch.org/docs/stable/distributed.html#collective-functions
    - https://github.com/pytorch/pytorch/issues/54059 (barrier hangs: evaluation of the DDP model on rank 0)
    - https://github.com/pytorch/pytorch/issues/138322
    """

    code = "DDP009"
    name = "collective-in-rank-branch"
    severity = Severity.ERROR
    MESSAGES = {
        "collective": (
            "`{what}()` runs only under a rank condition ({cond}): the other ranks never join it "
            "and the job hangs; call it on every rank, outside the branch"
        ),
        "helper": (
            "`{what}()` performs a collective and runs only under a rank condition ({cond}): the "
            "other ranks never join it and the job hangs; call it on every rank, outside the branch"
        ),
        "helper_forward": (
            "`{what}()` runs the DDP model's forward and is called only under a rank condition "
            "({cond}): DDP's forward synchronises buffers with the other ranks, which never join, "
            "and the job hangs; hand it the inner module (`model.module`) for rank-0-only work"
        ),
        "forward": (
            "the DDP model `{what}` is called only under a rank condition ({cond}): DDP's forward "
            "synchronises buffers with the other ranks, which never join, and the job hangs; call "
            "`{what}.module(...)` for rank-0-only work"
        ),
    }
    MESSAGE = MESSAGES["collective"]
    OWN_MESSAGE = (
        "`{what}()` {how} only under `if {test}`, a test of this rank's own values (its unreduced "
        "training loss): the ranks where it fails never join the collective and the job hangs; "
        "reduce the value across ranks before testing it, or call it on every rank"
    )
    LOOP_MESSAGE = (
        "this loop runs `{what}()` `{name}` times, and `{name}` is set only under `if {cond}`: the "
        "ranks run the collective a different number of times and the job hangs; give every rank "
        "the same count (read it back from the broadcast tensor)"
    )

    VALID = [
        """
        # A resume path sets the epoch count again, on rank 0, to what every rank already has.
        import torch
        import torch.distributed as dist
        def train(opt):
            epochs = opt.epochs
            if dist.get_rank() == 0 and opt.resume:
                model.load_state_dict(torch.load(opt.resume, map_location="cpu"))
                epochs = opt.epochs
            for epoch in range(epochs):
                loss = torch.zeros(1)
                dist.all_reduce(loss)
        """,
        """
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.all_reduce(loss)
        if dist.get_rank() == 0:
            print(loss.item())
        dist.barrier()
        """,
        """
        # Balanced: the same collective on both sides.
        import torch.distributed as dist
        if dist.get_rank() == 0:
            objs = [load_config()]
            dist.broadcast_object_list(objs, src=0)
        else:
            objs = [None]
            dist.broadcast_object_list(objs, src=0)
        """,
        """
        # Balanced however it is spelled.
        import torch
        import torch.distributed as dist
        if torch.distributed.get_rank() != 0:
            torch.distributed.barrier()
        prepare_cache()
        if dist.get_rank() == 0:
            dist.barrier()
        """,
        """
        # The zero-first context manager pairs its barriers.
        from contextlib import contextmanager
        import torch.distributed as dist
        @contextmanager
        def torch_distributed_zero_first(local_rank):
            if local_rank not in (-1, 0):
                dist.barrier(device_ids=[local_rank])
            yield
            if local_rank == 0:
                dist.barrier(device_ids=[0])
        with torch_distributed_zero_first(args.local_rank):
            dataset = build_dataset()
        """,
        """
        # HF-style cache guard: the conditions carry an extra flag on both sides.
        import torch
        def load_and_cache_examples(args, evaluate=False):
            if args.local_rank not in [-1, 0] and not evaluate:
                torch.distributed.barrier()
            features = build_features()
            if args.local_rank == 0 and not evaluate:
                torch.distributed.barrier()
            return features
        """,
        """
        # "Is distributed" guards are not rank conditions.
        import torch.distributed as dist
        if args.distributed:
            dist.barrier()
        if world_size > 1 and dist.is_initialized():
            dist.all_reduce(t)
        """,
        """
        # The plain module, called on rank 0 before it is wrapped.
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if dist.get_rank() == 0:
            print(model(example).shape)
        model = DDP(model, device_ids=[local_rank])
        """,
        """
        # Rank-0 evaluation through the inner module.
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net, device_ids=[local_rank])
        if dist.get_rank() == 0:
            out = model.module(batch)
        """,
        """
        # Rank-0 evaluation of an EMA copy: `--use-ema` is a store_true flag whose default is
        # already True, so the DDP model is never the one evaluated.
        import argparse
        import copy
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        parser = argparse.ArgumentParser()
        parser.add_argument("--use-ema", action="store_true", default=True)
        args = parser.parse_args()
        ema = copy.deepcopy(net)
        model = DDP(net, device_ids=[local_rank])
        if args.use_ema:
            eval_model = ema
        else:
            eval_model = model
        if dist.get_rank() == 0:
            out = eval_model(batch)
        """,
        """
        # The count rank 0 found is read back from the broadcast on every rank.
        import torch
        import torch.distributed as dist
        def sync_keys(rank, state):
            count = 0
            if rank == 0:
                count = len(state)
            size = torch.tensor([count])
            dist.broadcast(size, src=0)
            count = int(size.item())
            for i in range(count):
                dist.broadcast(torch.zeros(4), src=0)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            dist.init_process_group("gloo")
            if dist.get_rank() == 0:
                dist.barrier()
            """,
            lines=(4,),
        ),
        Invalid(
            """
            # A helper of this file that reduces, called on the main process only.
            import torch
            def reduce_mean(t):
                torch.distributed.all_reduce(t)
                return t / torch.distributed.get_world_size()
            def is_main_process():
                return torch.distributed.get_rank() == 0
            if is_main_process():
                print(reduce_mean(loss))
            """,
            lines=(9,),
        ),
        Invalid(
            """
            # Evaluating the DDP model on rank 0 only.
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(net, device_ids=[local_rank])
            if args.local_rank in (-1, 0):
                with torch.no_grad():
                    val_loss = model(val_batch)
            """,
            lines=(7,),
        ),
        Invalid(
            """
            # The DDP model kept on `self`, evaluated in another method on rank 0 only.
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            class Trainer:
                def __init__(self, model, local_rank):
                    self.model = DDP(model, device_ids=[local_rank])
                def evaluate(self, batch):
                    if dist.get_rank() == 0:
                        return self.model(batch)
            """,
            lines=(9,),
        ),
        Invalid(
            """
            # The flag can be switched on, so the DDP model may be the one evaluated on rank 0.
            import argparse
            import copy
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            parser = argparse.ArgumentParser()
            parser.add_argument("--no-ema", action="store_true")
            args = parser.parse_args()
            ema = copy.deepcopy(net)
            model = DDP(net, device_ids=[local_rank])
            eval_model = model if args.no_ema else ema
            if dist.get_rank() == 0:
                out = eval_model(batch)
            """,
            lines=(13,),
        ),
        Invalid(
            """
            # After an early return on the other ranks.
            import torch.distributed as dist
            def log_metrics(rank, t):
                if rank != 0:
                    return
                dist.all_reduce(t)
            """,
            lines=(6,),
        ),
        Invalid(
            """
            # The count is set on rank 0 only: rank 0 loops, the others skip the broadcasts.
            import torch
            import torch.distributed as dist
            def sync_keys(rank, state):
                count = 0
                if rank == 0:
                    count = len(state)
                dist.broadcast(torch.tensor([count]), src=0)
                for i in range(count):
                    dist.broadcast(torch.zeros(4), src=0)
            """,
            lines=(9,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        found: list[_Candidate] = []
        for site in model.paths.sites():
            if not site.guards:
                continue
            guard = model.paths.rank_guard(site)
            if guard is None:
                continue
            if model.paths.single_only(site) is not None or model.paths.never(site) is not None:
                continue  # (only a run without other ranks, or no run, gets there)
            name = model.api(site)
            what = site.dotted or name or ""
            if api.is_collective(name):
                kind = "collective"
            elif name is not None and self._library_forwards_ddp(site, name):
                kind = "helper_forward"
            elif name is not None and site.target is None:
                continue  # an outside API that is not a collective
            elif self._is_ddp_model(site):
                if self._quiet_forward(site):
                    continue
                kind = "forward"
            elif self._forwards_ddp_argument(site) or self._method_forwards_ddp(site):
                kind = "helper_forward"
            elif self._performs_collective(model.facts.of_call(site)):
                kind = "helper"
            else:
                continue
            found.append(_Candidate(site, guard, what, kind, name or what))
        # The same collective or helper called again in the next statement of one branch
        # (`train = reduce(train_loss)`, then `val = reduce(val_loss)`) is one action with one
        # fix: reported once, at its first call. Calls with other work between them (a barrier
        # before and after a rank-0 evaluation) are each a place where the ranks part, and so
        # are different calls.
        last: dict[tuple[int, int, str], int] = {}  # (module, guard, callee) -> statement index
        order = {id(c.node): i for module in {id(f.call.module): f.call.module for f in found}.values()
                 for i, c in enumerate(module.calls)}
        for c in sorted(found, key=lambda f: (f.call.module.path, order.get(id(f.call.node), 0))):
            if any(
                o is not c and o.key == c.key and o.call.scope is c.call.scope and self._side(o) != self._side(c)
                for o in found
            ):
                continue  # balanced: the other ranks make the same call
            if self._met_after_exit(c, found):
                continue
            guard = c.guard
            index = _statement_index(guard, c.call.node)
            if index is not None:
                branch = (id(c.call.module), id(guard.node), c.key)
                previous = last.get(branch)
                last[branch] = index
                if previous is not None and index - previous <= 1:
                    continue
            self.report(c.call.node, self.MESSAGES[c.kind].format(what=c.what, cond=self._describe(c)),
                        module=c.call.module, related=model.paths.chain(c.call))
        self._rank_counted_loops()
        self._own_value_branches()

    def _own_value_branches(self) -> None:
        """`if avg_loss < best_loss: save_checkpoint(state, path, rank)` where `avg_loss` is the
        mean of the rank's own training losses (`epoch_losses.append(loss.item())` in a loop that
        back-propagates, no collective in it) and the helper makes a collective (a barrier around
        rank 0's save): the ranks whose loss did not improve skip it."""
        model = self.model
        for site in model.paths.sites():
            if not site.guards or model.paths.rank_guard(site) is not None:
                continue
            name = model.api(site)
            if api.is_collective(name):
                kind = "collective"
            elif site.target is not None and self._performs_collective(model.facts.of_call(site)):
                kind = "helper"
            else:
                continue
            guard = next((g for g in reversed(site.guards) if not g.negated and isinstance(g.node, cst.If)
                          and self._own_test(site, g.test)), None)
            if guard is None:
                continue
            if model.paths.single_only(site) is not None or model.paths.never(site) is not None:
                continue
            key = name or site.dotted or ""
            if any(o.scope is site.scope and (model.api(o) or o.dotted or "") == key
                   and any(g.node is guard.node and g.negated for g in o.guards) for o in model.paths.sites()):
                continue  # the same call in the `else:`: every rank makes it
            self.report(site.node, self.OWN_MESSAGE.format(
                what=site.dotted or name or "the collective", test=model.text_of(site.module, guard.test),
                how="performs a collective and runs" if kind == "helper" else "runs"),
                module=site.module, related=model.paths.chain(site))

    def _own_test(self, site: CallSite, test: cst.BaseExpression) -> bool:
        """`test` reads a name of the function whose every binding reaching `site` is an aggregate
        of the rank's own training losses (see _own_aggregate)."""
        for node in subexpressions(test):
            if not isinstance(node, cst.Name):
                continue
            pairs = self.model.values.reaching(site.scope, node.value, site.point)
            if pairs and all(isinstance(value, cst.BaseExpression) and self._own_aggregate(site, value)
                             for value, _ in pairs):
                return True
        return False

    def _own_aggregate(self, site: CallSite, value: cst.BaseExpression) -> bool:
        """`np.mean(losses)`, `sum(losses) / len(losses)`, `total / steps`: a list the function
        appends `x.item()` values to, or a total it adds them to, in a loop that back-propagates
        and makes no collective that could have reduced them."""
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide):
            left = value.left
            if isinstance(left, cst.Name):
                return self._own_total(site, left.value)
            value = left
        if not isinstance(value, cst.Call) or not value.args or not isinstance(value.args[0].value, cst.Name):
            return False
        if self.model.qualname(site.module, value.func, site.scope) not in _AGGREGATES:
            return False
        listed = value.args[0].value.value
        appends = [c for c in site.module.calls if c.scope is site.scope and c.method == "append"
                   and isinstance(c.node.func, cst.Attribute) and dotted(c.node.func.value) == listed]
        return bool(appends) and all(len(c.node.args) == 1 and self._own_item(c.node.args[0].value)
                                     and self._training_loop(site, c.loops) for c in appends)

    def _own_total(self, site: CallSite, name: str) -> bool:
        bindings = site.scope.assignments.get(name, [])
        points = site.scope.points.get(name, [])
        added = [(b, points[i] if i < len(points) else None) for i, b in enumerate(bindings)
                 if isinstance(b, Augmented)]
        return bool(added) and all(point is not None and self._own_item(binding.node.value)
                                   and self._training_loop(site, point.loops) for binding, point in added)

    @staticmethod
    def _own_item(value: cst.BaseExpression) -> bool:
        return any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "item"
                   and not n.args for n in subexpressions(value))

    def _training_loop(self, site: CallSite, loops: tuple[cst.CSTNode, ...]) -> bool:
        """The innermost of `loops` (in `site`'s function, not around `site`) back-propagates and
        makes no collective of its own (a reduced loss would be the same on every rank)."""
        if not loops or loops[-1] in site.loops:
            return False
        loop = loops[-1]
        inside = [c for c in site.module.calls if c.scope is site.scope and loop in c.loops]
        return any(c.method == "backward" or self.model.facts.does(c, "backward") for c in inside) \
            and not any(self.model.facts.does(c, "data_collective") for c in inside)

    def _met_after_exit(self, c: _Candidate, found: list[_Candidate]) -> bool:
        """`if not use_ddp and rank != 0: dist.barrier(); return`, and `dist.barrier()` later in
        the function on every rank: the ranks that leave early meet the others' later call."""
        guard = c.guard
        if guard.negated or not isinstance(guard.node, cst.If) or not c.call.guards \
                or c.call.guards[-1] is not guard:
            return False
        guarded = {id(o.call.node) for o in found}
        for site in self.model.paths.sites():
            if site.scope is c.call.scope and id(site.node) not in guarded \
                    and any(g.node is guard.node and g.negated for g in site.guards) \
                    and (self.model.api(site) or site.dotted or "") == c.key:
                return True
        return False

    def _rank_counted_loops(self) -> None:
        """`for i in range(n):` around a collective, where `n` is set on rank 0 only (`n = 0`,
        then `if rank == 0: n = len(keys)`): rank 0 runs the collective n times, the others
        never (or a different number of times), so it waits for partners that are elsewhere."""
        model = self.model
        paths = model.paths
        reported: set[int] = set()
        for site in paths.sites():
            if not site.loops or paths.rank_guard(site) is not None:
                continue
            if not api.is_collective(model.api(site)):
                continue
            for loop in site.loops:
                if id(loop) in reported or not isinstance(loop, cst.For):
                    continue
                where = next((f for f in site.module.fors if f.node is loop), None)
                if where is None:
                    continue
                count = self._rank_zero_count(where.node.iter, where.scope, where.point, site.module)
                if count is None:
                    continue
                reported.add(id(loop))
                name, guard = count
                test = " ".join(site.module.code(guard.test).split())
                self.report(loop, self.LOOP_MESSAGE.format(name=name, cond=test, what=site.dotted or "the collective"),
                            module=site.module, related=[*paths.chain(site), site])

    def _rank_zero_count(self, iterable: cst.BaseExpression, scope: Scope, at: Point,
                         module: ModuleModel) -> tuple[str, Guard] | None:
        """A local name the loop's iterable is built from (`range(n)`, `keys`) that reaches the
        loop with a value set under a rank-0 condition and with one set on every rank."""
        if isinstance(iterable, cst.Call) and dotted(iterable.func) in ("range", "enumerate", "zip"):
            parts = [a.value for a in iterable.args]
        else:
            parts = [iterable]
        for part in parts:
            if not isinstance(part, cst.Name):
                continue
            pairs = self.model.values.reaching(scope, part.value, at)
            if any(point is None for _, point in pairs):
                return None  # where it is set is not known
            found = self.model.paths.set_by_rank(module, scope, part.value, at, items=True)
            if found is None:
                continue
            guard, everywhere = found
            if everywhere and self.model.paths.kind(module, guard, scope) == "main":
                return part.value, guard
        return None

    # --- forwards that broadcast nothing ---------------------------------------------------
    # DDP broadcasts the buffers at a forward only while `require_forward_param_sync` holds, and
    # every forward sets that flag from its own mode (`_post_forward`: on after a forward with
    # gradients on, off after one under no_grad; on when the wrapper is built). A rank-0 forward
    # under no_grad whose process last ran that wrapper under no_grad too (the every-rank
    # validation at the end of `train()`, then `if rank == 0: trainer.test()`) sends nothing.

    def _quiet_forward(self, site: CallSite) -> bool:
        """`site`, a call of a DDP wrapper under `torch.no_grad()`, is known to follow, on its
        process, a forward of the same wrapper that also ran under no_grad, with no forward
        with gradients on between them."""
        model = self.model
        if not is_no_grad(model, site.module, site.withs, site.scope.qualname):
            return False
        wraps = {id(v.call) for v in model.values.at_call(site, site.node.func)
                 if v.call is not None and is_ddp(model, v)}
        return bool(wraps) and self._last_before(site, wraps, _FORWARD_DEPTH) is True

    def _last_before(self, site: CallSite, wraps: set[int], depth: int) -> bool | None:
        """Whether the last forward of the wrappers `wraps` before `site` ran under no_grad
        (True), with gradients on or not at all (False: the wrapper starts with the flag on), or
        is not known (None): a forward on a branch `site` may run without, a call that may run
        the wrapper in a way not read. Read in `site`'s function, then in every caller of it,
        `depth` calls up."""
        calls = [c for c in site.module.calls_in(site.scope.qualname) if c.scope is site.scope and c is not site]
        # A forward later in a loop around `site` comes before it on the next pass.
        for call in calls:
            if call.tick > site.tick and any(loop in call.loops for loop in site.loops) \
                    and self._forward_event(call, wraps, depth) not in ("none", "quiet"):
                return None
        for call in sorted((c for c in calls if c.tick < site.tick), key=lambda c: -c.tick):
            if exclusive_arms(call.guards, site.guards):
                continue
            event = self._forward_event(call, wraps, depth)
            if event == "none":
                continue
            held = {(id(g.node), g.negated) for g in site.guards}
            if event == "unknown" or any((id(g.node), g.negated) not in held for g in call.guards):
                return None  # (a forward on a branch: the one before it may be the last)
            return event == "quiet"
        function = self.model.paths.function_of(site)
        if function is None or depth <= 0:
            return False if function is None else None
        callers = self.model.graph.callers(function)
        if not callers:
            return None
        answers = {self._last_before(caller, wraps, depth - 1) for caller, _ in callers}
        return answers.pop() if len(answers) == 1 else None if None in answers else False

    def _forward_event(self, call: CallSite, wraps: set[int], depth: int) -> str:
        """What `call` does to the wrappers `wraps`: "none" (no forward of them), "quiet" (its
        last forward of them runs under no_grad), "loud" (with gradients on), "unknown"."""
        model = self.model
        quiet = is_no_grad(model, call.module, call.withs, call.scope.qualname)
        func = call.node.func
        if isinstance(func, (cst.Name, cst.Attribute)) and any(
                v.call is not None and id(v.call) in wraps and is_ddp(model, v) for v in model.values.at_call(call, func)):
            return "quiet" if quiet else "loud"
        name = model.api(call)
        if name is not None and self._library_forwards_ddp(call, name) or self._forwards_ddp_argument(call):
            # (handed the wrapper: how the function runs it is not read here)
            return "quiet" if quiet else "unknown"
        events = {self._last_in(callee, wraps, depth - 1) for callee, _ in model.graph.targets(call)} \
            if depth > 0 else set()
        events.discard("none")
        if not events:
            return "none"
        event = events.pop() if len(events) == 1 else "unknown"
        return "quiet" if quiet else event

    def _last_in(self, function: Function, wraps: set[int], depth: int) -> str:
        """The last forward of the wrappers `wraps` that `function` makes (see _forward_event);
        "unknown" when it runs on a branch, so that an earlier one may be the last."""
        calls = [c for c in function.module.calls_in(function.qualname)
                 if c.scope.function is function.scope.function]
        for call in sorted(calls, key=lambda c: -c.tick):
            event = self._forward_event(call, wraps, depth)
            if event == "none":
                continue
            return "unknown" if call.guards else event
        return "none"

    @staticmethod
    def _performs_collective(facts: frozenset[str]) -> bool:
        """A collective that runs only in training mode (under `if self.training:`) does not run
        in an evaluation that puts the model in eval mode (`model.eval()`) first."""
        return "collective" in facts and ("collective_any_mode" in facts or "eval_mode" not in facts)

    def _describe(self, c: _Candidate) -> str:
        guard = c.guard
        test = " ".join(c.call.module.code(guard.test).split())
        if not guard.negated:
            return f"`if {test}`"
        if isinstance(guard.node, cst.If) and guard.node.orelse is None:  # an early exit: `if rank != 0: return`
            return f"after `if {test}:` exits"
        return f"the else of `if {test}`"

    def _side(self, c: _Candidate) -> bool:
        """True when the call runs on rank 0 only, False when on every rank but rank 0."""
        resolve = self.model.resolver_for(c.call.module, c.call.scope)
        return bool(selects_main_rank(c.guard.test, resolve)) != c.guard.negated

# How many calls up (and down) the last forward before a rank-0 forward is looked for.
_FORWARD_DEPTH = 3

# Aggregates of a list of Python numbers.
_AGGREGATES = frozenset({"numpy.mean", "numpy.average", "numpy.sum", "numpy.median", "statistics.mean",
                         "statistics.fmean", "sum", "mean"})


def _statement_index(guard: Guard, call: cst.Call) -> int | None:
    """The position, among the statements of the `if`'s branch that `call` runs in (its body,
    or its `else`), of the statement that holds the call; None when the call is not inside the
    `if` itself (the rest of a function after an early exit)."""
    node = guard.node
    if not isinstance(node, cst.If):
        return None
    branch = node.orelse if guard.negated else node
    if not isinstance(branch, (cst.If, cst.Else)) or not isinstance(branch.body, cst.IndentedBlock):
        return None
    for index, statement in enumerate(branch.body.body):
        if any(sub is call for sub in subexpressions(statement)):
            return index
    return None
