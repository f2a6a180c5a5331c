"""Names for the parameters an optimizer holds when no DDP model names them (data parallelism
written by hand, ZeroRedundancyOptimizer without the wrapper): the modules the user's code holds
in the frames that called `optimizer.step()` (their locals, and the attributes of `self` for a
trainer class) are asked for their `named_parameters()`; the module that holds most of the
optimizer's parameters names them first. Done once per new set of parameters; what no module
holds keeps its place in the optimizer (`param_groups[0][3]`).

Sharded parameters (FSDP's flat parameters, DTensors sharded over ranks) hold a different part
of the model on every rank by design: `sharded()` tells them apart, so that no check compares
them as if each rank held the whole.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

FRAMES = 40  # how far up the stack the modules are looked for
_names: dict[int, str] = {}
_scanned: set[int] = set()


def sharded(param: Any) -> bool:
    if getattr(param, "_is_flat_param", False):
        return True
    placements = getattr(param, "placements", None)  # a DTensor: sharded unless every placement replicates
    if placements is not None:
        return not all(bool(getattr(p, "is_replicate", lambda: False)()) for p in placements)
    return False


def modules_in(frame: FrameType | None) -> list[Any]:
    import torch.nn as nn

    found: dict[int, Any] = {}
    depth = 0
    while frame is not None and depth < FRAMES:
        values = list(frame.f_locals.values())
        owner = frame.f_locals.get("self")
        if owner is not None and not isinstance(owner, nn.Module):
            values.extend(getattr(owner, "__dict__", {}).values())
        for value in values:
            if isinstance(value, nn.Module):
                found.setdefault(id(value), value)
        frame, depth = frame.f_back, depth + 1
    return list(found.values())


def names(params: list[Any]) -> dict[int, str]:
    """id(param) -> its name in a module the calling code holds (those found)."""
    wanted = {id(p) for p in params}
    if wanted - _scanned:
        _scanned.update(wanted)
        ranked = []
        for module in modules_in(sys._getframe(1)):
            try:
                named = [(n.replace("_orig_mod.", ""), p) for n, p in module.named_parameters()]
            except Exception:  # noqa: BLE001 - a module that cannot list its parameters names nothing
                continue
            ranked.append((sum(id(p) in wanted for _, p in named), named))
        ranked.sort(key=lambda item: -item[0])
        for covered, named in ranked:
            if covered:
                for name, p in named:
                    if id(p) in wanted:
                        _names.setdefault(id(p), name)
    return {id(p): _names[id(p)] for p in params if id(p) in _names}
