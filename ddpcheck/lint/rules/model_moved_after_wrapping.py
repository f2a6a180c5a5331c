from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.wraps import ddp_wraps

_MOVES = ("to", "cuda", "cpu", "half", "bfloat16", "double")


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
        # A new model built later under the same name is moved before its own wrap.
        from torch.nn.parallel import DistributedDataParallel as DDP
        def main():
            teacher = DDP(Net().cuda())
            model = Net()
            model.cuda()
            model = DDP(model)
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
            line=4,
        ),
        Invalid(
            """
            import torch
            model = Net()
            model = torch.nn.parallel.DistributedDataParallel(model).cuda()
            """,
            line=3,
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = Net()
            model = DDP(net, device_ids=[gpu])
            net.cuda(gpu)
            """,
            line=4,
        ),
    ]

    def finish(self) -> None:
        wraps = ddp_wraps(self.ctx)
        for wrap in wraps:
            parent_move = self._moved_wrapper_expression(wrap)
            if parent_move is not None:
                self.report(parent_move)
                continue
            watched = {n for n in (wrap.outer, wrap.inner) if n}
            if not watched:
                continue
            # The next rebinding of a watched name ends the watch (a new model under that name).
            inside = _descendant_ids(wrap.call.node)
            for call in self.ctx.calls[wrap.index + 1:]:
                if call.scope is not wrap.call.scope or id(call.node) in inside:
                    continue
                if call.qualname is None and call.method in _MOVES and call.receiver in watched:
                    if _rebound_between(wrap, call, call.receiver):
                        watched.discard(call.receiver)
                        continue
                    self.report(call.node)
                    break

    def _moved_wrapper_expression(self, wrap) -> cst.CSTNode | None:
        """`DDP(model).cuda()`: the wrap is the receiver of a move."""
        for values in wrap.call.scope.assignments.values():
            for value in values:
                if (
                    isinstance(value, cst.Call)
                    and isinstance(value.func, cst.Attribute)
                    and value.func.value is wrap.call.node
                    and value.func.attr.value in _MOVES
                ):
                    return value
        return None


def _descendant_ids(node: cst.CSTNode) -> set[int]:
    found: set[int] = set()

    class _V(cst.CSTVisitor):
        def on_visit(self, n):
            found.add(id(n))
            return True

    node.visit(_V())
    return found


def _rebound_between(wrap, call, name: str) -> bool:
    """Whether `name` gets a non-DDP value between the wrap and `call` (a new module)."""
    values = wrap.call.scope.assignments.get(name, [])
    # Values are in source order; the wrap's own assignment is `wrap.call.node` (for the outer).
    seen_wrap = False
    for value in values:
        if value is wrap.call.node:
            seen_wrap = True
            continue
        if seen_wrap or name == wrap.inner:
            # A later non-wrap value: accept it only if it appears after the wrap in the source.
            if _starts_after(value, wrap.call.node, wrap) and not _starts_after(value, call.node, wrap):
                return True
    return False


def _starts_after(a: cst.CSTNode, b: cst.CSTNode, wrap) -> bool:
    return _order(wrap).get(id(a), -1) > _order(wrap).get(id(b), -1)


def _order(wrap) -> dict[int, int]:
    """Source order of assignment values and calls of the wrap's scope (by a pre-order walk)."""
    cached = getattr(wrap.call.scope, "_ddp014_order", None)
    if cached is None:
        cached = {}

        class _V(cst.CSTVisitor):
            def on_visit(self, node):
                cached.setdefault(id(node), len(cached))
                return True

        wrap.call.scope.node.visit(_V())
        wrap.call.scope._ddp014_order = cached
    return cached
