"""Where models are wrapped in DDP: `ddp = DDP(model)`, `model = DDP(model)`, `self.m = DDP(self.m)`.

Several rules ask the same questions ("which names hold the DDP model? which hold the inner
module?"), so the answer is computed once per file, after the traversal, from the recorded calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpcheck.lint.context import DDP, CallSite, FileContext, Scope
from ddpcheck.lint.names import dotted


@dataclass(frozen=True, eq=False)
class Wrap:
    call: CallSite
    index: int  # position of the wrapping call in ctx.calls (source order)
    outer: str | None  # the name the DDP model is bound to, if any
    inner: str | None  # the name of the wrapped module, if it is a plain name/attribute chain


def assigned_names(scope: Scope, node: cst.CSTNode) -> list[str]:
    """The names `node` is assigned to directly in `scope` (`x = node`)."""
    return [name for name, values in scope.assignments.items() if any(v is node for v in values)]


def ddp_wraps(ctx: FileContext) -> list[Wrap]:
    cached = getattr(ctx, "_ddp_wraps", None)
    if cached is not None:
        return cached
    wraps = []
    for index, call in enumerate(ctx.calls):
        if call.qualname != DDP:
            continue
        module = call.arg("module", 0)
        inner = _strip_moves(module) if module is not None else None
        outer = _outer_name(call, ctx)
        wraps.append(Wrap(call, index, outer, dotted(inner) if inner is not None else None))
    ctx._ddp_wraps = wraps
    return wraps


def _strip_moves(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`model.to(device)` / `model.cuda()` → `model` (the module being wrapped)."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("to", "cuda", "cpu", "half", "float", "bfloat16")
    ):
        expr = expr.func.value
    return expr


def _outer_name(call: CallSite, ctx: FileContext) -> str | None:
    names = assigned_names(call.scope, call.node)
    if names:
        return names[0]
    # `model = DDP(model).to(device)`: the wrap is the receiver of the assigned call.
    for name, values in call.scope.assignments.items():
        for value in values:
            if _strip_moves(value) is call.node:
                return name
    return None


def is_optimizer_step(call: CallSite) -> bool:
    """`optimizer.step()`, `self.opt.step()`, `scaler.step(optimizer)`; not `scheduler.step()`."""
    if call.method != "step":
        return False
    receiver = (call.receiver or "").rsplit(".", 1)[-1].lower()
    if "sched" in receiver:
        return False
    return "opt" in receiver or "scaler" in receiver or receiver in ("solver",)


def visible_from(name: str, defined: Scope, used: Scope) -> bool:
    """Whether a name bound in `defined` is the one meant in `used` (same or nested scope;
    `self.x` attributes are shared by the methods of a class)."""
    if name.startswith("self."):
        return True
    scope: Scope | None = used
    while scope is not None:
        if scope is defined:
            return True
        scope = scope.parent
    return False
