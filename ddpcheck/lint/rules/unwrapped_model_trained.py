from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.conditions import on_main_rank_only
from ddpcheck.lint.context import CallSite, Scope
from ddpcheck.lint.names import dotted, last_name
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.wraps import ddp_wraps, exclusive, visible_from

_NO_GRAD = ("no_grad", "inference_mode")


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

    Not reported: calls of the inner module under `torch.no_grad()` / `torch.inference_mode()`,
    under a rank-0 guard (evaluating the plain module on the main process is the right way to
    avoid a hang), or in loops without a `backward()`.

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
            line=5,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.parallel.DistributedDataParallel(model)
            for x in loader:
                out = model.module(x)
                out.sum().backward()
            """,
            line=4,
        ),
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[gpu])
        model_without_ddp = model.module
        def train_one_epoch():
            for x in loader:
                loss = criterion(model_without_ddp(x))
                scaler.scale(loss).backward()
        """,
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        class Trainer:
            def __init__(self, net):
                self.model = DDP(net)
            def step(self, x):
                loss = self.model.module(x).mean()
                loss.backward()
        """,
    ]

    def finish(self) -> None:
        wraps = ddp_wraps(self.ctx)
        if not wraps:
            return
        # (name, wrap scope, index after which it is the inner module, outer name)
        inner_names: list[tuple[str, Scope, int, str]] = []
        for wrap in wraps:
            outer = wrap.outer or "the DDP model"
            if wrap.inner and wrap.inner != wrap.outer:
                inner_names.append((wrap.inner, wrap.call.scope, wrap.index, outer))
            if wrap.outer:
                inner_names.append((f"{wrap.outer}.module", wrap.call.scope, wrap.index, outer))
                for name, values in wrap.call.scope.assignments.items():
                    if any(dotted(v) == f"{wrap.outer}.module" for v in values):
                        inner_names.append((name, wrap.call.scope, wrap.index, outer))
        if not inner_names:
            return
        backwards = [c for c in self.ctx.calls if c.method == "backward"]
        if not backwards:
            return
        for index, call in enumerate(self.ctx.calls):
            if call.dotted is None or call.qualname is not None:
                continue
            for name, scope, after, outer in inner_names:
                if call.dotted != name or index <= after or not visible_from(name, scope, call.scope):
                    continue
                if exclusive(self.ctx.calls[after], call):
                    continue  # `if distributed: ddp = DDP(model) ... else: model(x)`
                if not self._in_training_step(call, backwards):
                    continue
                self.report(
                    call.node,
                    f"`{name}(...)` runs the module inside DDP, so its gradients are never "
                    f"all-reduced and the replicas drift apart; call `{outer}(...)` in the training step",
                )
                break

    def _in_training_step(self, call: CallSite, backwards: list[CallSite]) -> bool:
        if any(_is_no_grad(self.ctx, w) for w in call.withs):
            return False
        if on_main_rank_only(call.guards, self.ctx.qualname):
            return False
        for b in backwards:
            if b.scope is not call.scope:
                continue
            if call.loops and call.loops[-1] in b.loops:
                return True
            if not call.loops and not b.loops:
                return True
        return False


def _is_no_grad(ctx, with_node: cst.With) -> bool:
    for item in with_node.items:
        expr = item.item
        func = expr.func if isinstance(expr, cst.Call) else expr
        name = last_name(func) or ""
        if name in _NO_GRAD:
            return True
    return False
