"""Where a script hands each rank its own share of the data by hand, without a sampler:
`x[rank::world_size]`, `np.array_split(x, world_size)[rank]`, `idx.chunk(world_size)[rank]`,
`rays[bounds[rank]:bounds[rank + 1]]`, `x[rank * n:(rank + 1) * n]`,
`partition(data, num_partitions=world_size)[rank]`. Rules that ask "does each rank read other
data?" (the seed rule: then the ranks do not draw alike) and "is this split even?" read the same
shapes from here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from ddpcheck.lint.model.conditions import Resolve, is_rank_value
from ddpcheck.lint.model.module import CallSite, ModuleModel, Scope
from ddpcheck.lint.model.syntax import children, dotted, subexpressions
from ddpcheck.lint.model.world import WORLD_NAMES, is_world_value

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

SPLITTERS = frozenset({"numpy.array_split", "torch.chunk", "torch.tensor_split", "numpy.split"})


def takes_own_share(model: Model) -> bool:
    """Whether the linted file gives each rank its own share of the data by hand, in any of the
    shapes above: in an assignment for the strided and split shapes, anywhere in the file's code
    (a dataset method's `return` too) for the two-bound slice and the rank's item of a
    world-size partition. One bound alone (`x[rank:]`) is no share."""
    root = model.root
    found = root.memo.get("takes_own_share")
    if found is None:
        found = any(is_own_share(model, root, value, scope) for scope, value in assigned_expressions(root)) \
            or _share_anywhere(root, model.resolver_for(root))
        root.memo["takes_own_share"] = found
    return bool(found)


def assigned_expressions(root: ModuleModel) -> Iterator[tuple[Scope, cst.BaseExpression]]:
    """Every value bound by an assignment in the module or one of its functions, with its scope."""
    scopes: list[Scope] = [root.module_scope, *root.function_scopes.values()]
    for scope in scopes:
        for values in scope.assignments.values():
            for value in values:
                if isinstance(value, cst.BaseExpression):
                    yield scope, value


def strided_by_rank(sub: cst.Subscript, resolve: Resolve, scope: Scope) -> bool:
    """`x[rank::world_size]` (the world size by its value: `ws = dist.get_world_size()`)."""
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Slice):
        return False
    piece = sub.slice[0].slice
    return piece.lower is not None and piece.step is not None and is_rank_value(piece.lower, resolve) \
        and is_world_value(piece.step, scope, resolve)


def indexed_by_rank(sub: cst.Subscript, resolve: Resolve) -> bool:
    """`parts[rank]`."""
    return len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) \
        and is_rank_value(sub.slice[0].slice.value, resolve)


def split_per_rank(site: CallSite) -> bool:
    """`idx.split(ceil(len(idx) / world_size))`, `idx.chunk(world_size)`, `x.tensor_split(world_size)`:
    a tensor split into one piece per rank (a world-size argument tells it from `text.split(",")`)."""
    if site.method not in ("split", "chunk", "tensor_split"):
        return False
    return any(any(w in (dotted(sub) or "") for w in WORLD_NAMES)
               for arg in site.node.args for sub in subexpressions(arg.value)
               if isinstance(sub, (cst.Name, cst.Attribute)))


def is_own_share(model: Model, module: ModuleModel, expr: object, scope: Scope) -> bool:
    """`expr` (a value's node) is one rank's share in any of the shapes above: `x[rank::world]`,
    `x[rank * n:(rank + 1) * n]`, `bounds[rank]:bounds[rank + 1]`, `np.array_split(x, world)[rank]`.
    Data read this way needs no sampler to shard it (DDP001 asks)."""
    if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1:
        return False
    resolve = model.resolver_for(module, scope)
    if strided_by_rank(expr, resolve, scope):
        return True
    piece = expr.slice[0].slice
    if isinstance(piece, cst.Slice):
        return piece.step is None and piece.lower is not None and piece.upper is not None \
            and _rank_bound(piece.lower, resolve) and _rank_bound(piece.upper, resolve)
    if isinstance(expr.value, cst.Call) and indexed_by_rank(expr, resolve):
        site = module.call_at(expr.value)
        return site is not None and (model.api(site) in SPLITTERS or split_per_rank(site))
    return False


def _share_anywhere(root: ModuleModel, resolve: Resolve) -> bool:
    stack: list[cst.CSTNode] = [root.tree]
    while stack:
        node = stack.pop()
        stack.extend(children(node))
        if not isinstance(node, cst.Subscript) or len(node.slice) != 1:
            continue
        piece = node.slice[0].slice
        if isinstance(piece, cst.Slice):
            if piece.step is None and piece.lower is not None and piece.upper is not None \
                    and _rank_bound(piece.lower, resolve) and _rank_bound(piece.upper, resolve):
                return True
        elif isinstance(piece, cst.Index) and isinstance(node.value, cst.Call) and is_rank_value(piece.value, resolve) \
                and any(is_world_value(sub, None, resolve) for arg in node.value.args
                        for sub in subexpressions(arg.value) if isinstance(sub, (cst.Name, cst.Attribute, cst.Call))):
            return True
    return False


def _rank_bound(expr: cst.BaseExpression, resolve: Resolve) -> bool:
    """A slice bound taken from the rank: `bounds[rank]`, `bounds[rank + 1]`, `rank * n`,
    `(rank + 1) * n`."""
    if isinstance(expr, cst.Subscript):
        if len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
            return False
        return _rank_or_next(expr.slice[0].slice.value, resolve)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return _rank_or_next(expr.left, resolve) or _rank_or_next(expr.right, resolve)
    return False


def _rank_or_next(expr: cst.BaseExpression, resolve: Resolve) -> bool:
    """`rank` or `rank + 1`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add) \
            and isinstance(expr.right, cst.Integer) and expr.right.value == "1":
        expr = expr.left
    return not isinstance(expr, (cst.Integer, cst.BinaryOperation)) and is_rank_value(expr, resolve)
