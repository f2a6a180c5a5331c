"""Follow a value back through the assignments of its scope: "what was `sampler` assigned from?"."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddpcheck.lint.context import FileContext, Scope
from ddpcheck.lint.names import dotted


def origins(ctx: FileContext, expr: cst.BaseExpression, scope: Scope, depth: int = 4) -> Iterator[cst.BaseExpression]:
    """`expr` itself and, for a name, every value it was assigned in `scope` or enclosing scopes,
    followed through plain name-to-name assignments and both arms of `a if c else b`."""
    yield expr
    if depth == 0:
        return
    if isinstance(expr, cst.IfExp):
        yield from origins(ctx, expr.body, scope, depth - 1)
        yield from origins(ctx, expr.orelse, scope, depth - 1)
        return
    name = dotted(expr)
    if name is None:
        return
    for value in scope.lookup(name):
        yield from origins(ctx, value, scope, depth - 1)


def is_call_to(ctx: FileContext, expr: cst.BaseExpression, scope: Scope, qualnames: set[str] | frozenset[str]) -> bool:
    """Whether `expr` is, or was assigned from, a call to one of `qualnames`."""
    return any(
        isinstance(v, cst.Call) and ctx.qualname(v.func) in qualnames for v in origins(ctx, expr, scope)
    )


def is_none(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
