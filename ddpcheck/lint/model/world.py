"""Whether an expression holds the world size (the number of ranks), read by its value.

Scripts name the world size freely (`world`, `ws`, `num_replicas`, `n_procs`); what makes a
name the world size is what it was given: `dist.get_world_size()`, the launcher's `WORLD_SIZE`
variable, or another name that holds one."""

from __future__ import annotations

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve
from ddpcheck.lint.model.module import Augmented, Scope
from ddpcheck.lint.model.syntax import dotted, last_name

# Names that hold the world size by the convention of every launcher and sampler.
WORLD_NAMES = ("world_size", "get_world_size", "WORLD_SIZE", "num_replicas", "nprocs", "ngpus", "n_gpus", "num_gpus")
_WORLD_CALLS = frozenset({api.GET_WORLD_SIZE, "horovod.torch.size"})


def is_world_value(expr: cst.BaseExpression, scope: Scope | None, resolve: Resolve, depth: int = 2) -> bool:
    """`world_size`, `dist.get_world_size()`, `int(os.environ["WORLD_SIZE"])`, or a name every
    binding of which is one of those (`world = dist.get_world_size()`). Unknown is False."""
    if isinstance(expr, cst.Call):
        if resolve(expr.func) in _WORLD_CALLS or last_name(expr.func) == "get_world_size":
            return True
        name = last_name(expr.func)
        if name == "int" and expr.args:
            return is_world_value(expr.args[0].value, scope, resolve, depth)
        if name in ("get", "getenv") and expr.args:
            return _is_world_key(expr.args[0].value)
        return False
    if isinstance(expr, cst.IfExp):
        # `dist.get_world_size() if dist.is_initialized() else 1`: one rank when not distributed.
        sides = (expr.body, expr.orelse)
        return any(is_world_value(side, scope, resolve, depth) for side in sides) \
            and all(isinstance(side, cst.Integer) or is_world_value(side, scope, resolve, depth) for side in sides)
    if isinstance(expr, cst.Subscript):
        base = dotted(expr.value) or ""
        if base.endswith("environ") and len(expr.slice) == 1:
            elem = expr.slice[0].slice
            return isinstance(elem, cst.Index) and _is_world_key(elem.value)
        return False
    text = dotted(expr) or ""
    if text and any(text.endswith(w) for w in WORLD_NAMES):
        return True
    if scope is None or depth <= 0 or not isinstance(expr, (cst.Name, cst.Attribute)) or not text:
        return False
    bindings = scope.lookup(text)
    values = [b for b in bindings if isinstance(b, cst.BaseExpression) and not isinstance(b, Augmented)]
    return bool(values) and len(values) == len(bindings) \
        and all(is_world_value(v, scope, resolve, depth - 1) for v in values)


def _is_world_key(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.SimpleString) and expr.evaluated_value in ("WORLD_SIZE", "SLURM_NTASKS")
