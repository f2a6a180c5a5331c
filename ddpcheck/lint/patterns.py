"""Small recognisers several rules share: CUDA device strings, world-size names, constants,
sub-expression search. Each works on one expression and its scope's assignments; none walks the
file (the engine's one traversal already did)."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from ddpcheck.lint.context import INIT_PROCESS_GROUP, CallSite, FileContext, Scope
from ddpcheck.lint.names import dotted, last_name

# Names whose value is (or is derived from) the number of ranks or the global batch.
WORLD_SIZE_NAME = re.compile(
    r"world_size|world|num_replicas|n_?replicas|global_batch|total_batch|effective_batch|eff_batch"
    r"|nprocs|num_processes|n_?procs|^n_?gpus?$|num_gpus|ngpus|gpus_per_node|num_nodes|nnodes",
    re.I,
)
_WORLD_SIZE_CALLS = ("get_world_size", "device_count", "num_processes")
_WORLD_SIZE_ENV = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"}

_ENTRY_POINT = re.compile(r"""__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__""")


def subexpressions(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and everything under it (for small subtrees: an argument, a condition)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)


def string_text(expr: cst.BaseExpression) -> str | None:
    """The literal text of a plain string, or the literal head of an f-string (`f"cuda:{i}"`
    → "cuda:")."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(expr, cst.FormattedString):
        head = expr.parts[0] if expr.parts else None
        return head.value if isinstance(head, cst.FormattedStringText) else ""
    if isinstance(expr, cst.ConcatenatedString):
        return string_text(expr.left)
    return None


def is_cuda_string(expr: cst.BaseExpression) -> bool:
    text = string_text(expr)
    return text is not None and text.startswith("cuda")


def is_world_size_expr(ctx: FileContext, expr: cst.BaseExpression, scope: Scope, depth: int = 4) -> bool:
    """Whether `expr`, or a name it is computed from (followed through assignments), involves the
    number of ranks: `get_world_size()`, `os.environ["WORLD_SIZE"]`, `world_size`, `args.ngpus`,
    a global batch size..."""
    for sub in subexpressions(expr):
        if isinstance(sub, cst.SimpleString) and sub.evaluated_value in _WORLD_SIZE_ENV:
            return True
        if isinstance(sub, cst.Call):
            if last_name(sub.func) in _WORLD_SIZE_CALLS:
                return True
            continue
        if isinstance(sub, (cst.Name, cst.Attribute)):
            name = dotted(sub)
            if name is None:
                continue
            if WORLD_SIZE_NAME.search(name.rsplit(".", 1)[-1]):
                return True
            if depth > 0:
                for value in scope.lookup(name):
                    if is_world_size_expr(ctx, value, scope, depth - 1):
                        return True
    return False


def is_constant(expr: cst.BaseExpression, scope: Scope, depth: int = 4) -> bool:
    """Whether `expr` is built only from number literals, directly or through names every one of
    whose assignments is itself constant: `0.01`, `1e-3 * 2`, `lr` after `lr = 0.1`. A function
    parameter, an attribute (`args.lr`), a call or a subscript (`cfg["lr"]`) is not constant."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return is_constant(expr.expression, scope, depth)
    if isinstance(expr, cst.BinaryOperation):
        return is_constant(expr.left, scope, depth) and is_constant(expr.right, scope, depth)
    if isinstance(expr, cst.Name) and depth > 0:
        values = scope.lookup(expr.value)
        return bool(values) and all(is_constant(v, scope, depth - 1) for v in values)
    return False


def is_entry_point(ctx: FileContext) -> bool:
    """The file is run as a script, not only imported as a helper module: it has a `__main__`
    guard or does work at module level (calls one of its functions, or sets up DDP there)."""
    if _ENTRY_POINT.search(ctx.source):
        return True
    return any(
        c.scope is ctx.module_scope and (c.dotted in ctx.functions or (c.qualname or "").startswith("torch.distributed."))
        for c in ctx.calls
    )


def init_sites(ctx: FileContext) -> list[CallSite]:
    """Calls that create the default process group: `init_process_group` itself or, when the file
    makes none, the calls of helpers known to make it (`setup()`, `utils.init_distributed_mode()`)."""
    direct = [c for c in ctx.calls if c.qualname == INIT_PROCESS_GROUP]
    if direct:
        return direct  # asking helpers costs a walk of their bodies; the direct call is enough
    return [c for c in ctx.calls if _may_be_helper(c) and ctx.helper_does(c, "init_process_group")]


def _may_be_helper(call: CallSite) -> bool:
    """A call that may reach a function of the project (not torch's, not a method of a value)."""
    return not (call.qualname or "").startswith("torch.") and call.dotted is not None
