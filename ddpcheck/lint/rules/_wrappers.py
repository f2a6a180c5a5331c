"""The wrappers around a model, outermost first: `DDP(torch.compile(net))` is ("ddp", "compile"),
`torch.compile(DDP(net))` is ("compile", "ddp"), a plain module (). What `.module` and
`._orig_mod` do to such a stack in torch 2.13:

- `.module` of a DDP wrapper is what it wraps; `.module` of a compiled module is forwarded to the
  module it compiled (`OptimizedModule.__getattr__`), so on ("compile", "ddp", ...) it reaches
  what DDP wraps;
- `._orig_mod` of a compiled module is the module it compiled; a DDP wrapper has none
  (AttributeError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import strip_moves
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import argument, dotted, expressions
from ddpcheck.lint.model.values import Value

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

COMPILE = api.COMPILE
UNKNOWN = "?"  # below this wrapper: a module the model cannot see
DEPTH = 4
Stack = tuple[str, ...]


def stacks_of(model: Model, values: list[Value], depth: int = DEPTH) -> list[Stack]:
    """The wrapper stacks the values may be (each once); an unknown leaf gives no stack."""
    out: list[Stack] = []
    for value in values:
        for stack in _stacks(model, value, depth):
            if stack not in out:
                out.append(stack)
    return out


def _stacks(model: Model, value: Value, depth: int) -> list[Stack]:
    call = value.call
    if call is None or depth <= 0:
        return []
    name = model.api_of(value)
    if name == api.DDP:
        head = "ddp"
        inner = argument(call, "module", 0)
    elif name == COMPILE:
        site = value.module.call_at(call)
        if site is not None and model.paths.single_only(site) is not None:
            # `if not distributed: model = torch.compile(model)`: the distributed run never
            # holds this compiled module, so it gives the distributed path no stack.
            return []
        head = "compile"
        inner = argument(call, "model", 0)
    else:
        # A module built by a class (a project class, a torch.nn layer, or a name spelled like a
        # class): the plain model. Project factories that return `torch.compile(...)` are
        # followed by the value flow. Any other call (`getattr(self, name)`, an unknown
        # function) is unknown.
        if model.graph.instance_of(value) is not None or (name or "").startswith("torch.nn."):
            return [()]
        last = (dotted(call.func) or "").rsplit(".", 1)[-1]
        return [()] if last[:1].isupper() else []
    if inner is None:
        return []
    inner = strip_moves(inner)
    below = stacks_of(model, model.values.of(value.module, inner, value.scope, value.frame, at=value.at), depth - 1)
    return [(head, *s) for s in below] or [(head, UNKNOWN)]


def attribute_chain(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.Attribute]]:
    """`m.module._orig_mod` → (m, [the `.module` node, the `._orig_mod` node])."""
    chain: list[cst.Attribute] = []
    while isinstance(expr, cst.Attribute) and expr.attr.value in ("module", "_orig_mod"):
        chain.append(expr)
        expr = expr.value
    chain.reverse()
    return expr, chain


def unwrap(stack: Stack, attribute: str) -> Stack | None:
    """The stack after `.module` / `._orig_mod`; None when the attribute does not exist there;
    (UNKNOWN,) when what it reaches is not known."""
    if stack[:1] == (UNKNOWN,):
        return stack
    if attribute == "_orig_mod":
        return stack[1:] if stack[:1] == ("compile",) else None
    if stack[:1] == ("ddp",):
        return stack[1:]
    if stack[:2] == ("compile", "ddp"):
        return stack[2:]
    if stack[:2] == ("compile", UNKNOWN):
        return (UNKNOWN,)
    return ()  # the module's own `.module` attribute, if any: not a wrapper


def at_site(model: Model, site: CallSite, base: cst.BaseExpression) -> list[Stack]:
    return stacks_of(model, model.values.at_call(site, base))


def saved_state_dicts(model: Model) -> Iterator[tuple[CallSite, Value, cst.Call, CallSite]]:
    """`x.state_dict()` calls whose result a `torch.save(...)` writes (directly or inside the
    object it saves): (the save, the value holding the call, the `.state_dict()` call node, its
    CallSite). A call of a save helper that forwards its `*args` to `torch.save` (`save_on_master(
    net.state_dict(), path)`) is the save of what it passes."""
    for save in model.paths.sites():
        if model.api(save) != api.SAVE:
            continue
        obj = save.arg("obj", 0)
        if obj is not None:
            passed = [(save, obj)]
        else:
            # `torch.save(*args, **kwargs)` in a save helper: what its callers pass.
            passed = model.graph.star_passed(save, 0)
        for call, expr in passed:
            yield from _state_dicts_in(model, call, expr)


def _state_dicts_in(model: Model, save: CallSite, obj: cst.BaseExpression
                    ) -> Iterator[tuple[CallSite, Value, cst.Call, CallSite]]:
    # A dict filled entry by entry before the save (`ckpt = {}; ckpt["G"] = G.state_dict()`)
    # holds what those writes put in it.
    for value in [*model.values.at_call(save, obj), *model.values.written_into(save, obj)]:
        node = value.node
        if not isinstance(node, cst.CSTNode):
            continue
        for sd in expressions(node):
            if isinstance(sd, cst.Call) and isinstance(sd.func, cst.Attribute) \
                    and sd.func.attr.value == "state_dict" and not sd.args:
                where = value.module.call_at(sd)
                if where is not None:
                    yield save, value, sd, where
            for named_value, named in _named_into_dict(model, value, sd, 3):
                where = named_value.module.call_at(named)
                if where is not None:
                    yield save, named_value, named, where
        # An entry given by a name bound to the call before (`state = net.state_dict()`, then
        # `torch.save({"model": state, "epoch": epoch}, path)`).
        for entry in _entries(node):
            if not isinstance(entry, cst.Name):
                continue
            for held in model.values.of(value.module, entry, value.scope, value.frame, at=value.at):
                bound = held.node
                if isinstance(bound, cst.Call) and isinstance(bound.func, cst.Attribute) \
                        and bound.func.attr.value == "state_dict" and not bound.args:
                    where = held.module.call_at(bound)
                    if where is not None:
                        yield save, held, bound, where


def _entries(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The values a dict, list or tuple display holds."""
    if isinstance(node, cst.Dict):
        return [e.value for e in node.elements if isinstance(e, cst.DictElement)]
    if isinstance(node, (cst.List, cst.Tuple)):
        return [e.value for e in node.elements if isinstance(e, cst.Element)]
    return []


NAMED = ("named_parameters", "named_buffers")


def _named(expr: cst.BaseExpression) -> bool:
    """`x.named_parameters()` / `x.named_buffers()`: (name, tensor) pairs named as the state
    dict of `x` names them (a DDP wrapper's with `module.` first)."""
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
        and expr.func.attr.value in NAMED and not expr.args


def _named_into_dict(model: Model, value: Value, node: cst.CSTNode, depth: int
                     ) -> Iterator[tuple[Value, cst.Call]]:
    """The `x.named_parameters()` calls whose names become the keys of the dict `node` makes,
    each with the value it is written in: `{k: v for k, v in x.named_parameters() if ...}`,
    `dict(x.named_parameters())`, and the same through the names the pairs or such a dict are
    bound to (`{k: t.cpu() for k, t in kept.items()}` after `kept = {k: t for k, t in
    named_params if "lora_" in k}` in a helper handed `model.named_parameters()`). A key made
    of the name alone or spelled from it; what else is done to the names is not followed."""
    if isinstance(node, cst.Call) and dotted(node.func) == "dict" and len(node.args) == 1 \
            and node.args[0].keyword is None and not node.args[0].star:
        yield from _named_pairs(model, value, node.args[0].value, depth)
        return
    if not isinstance(node, cst.DictComp):
        return
    for_in: cst.CompFor | None = node.for_in
    while for_in is not None:
        first = _first_target(for_in.target)
        if first is not None and _uses(node.key, first):
            yield from _named_pairs(model, value, for_in.iter, depth)
        for_in = for_in.inner_for_in


def _named_pairs(model: Model, value: Value, expr: cst.BaseExpression, depth: int
                 ) -> Iterator[tuple[Value, cst.Call]]:
    """(name, tensor) pairs of `x.named_parameters()` that `expr`, iterated, gives: the call
    itself, the `.items()` of a dict keyed by such names, or a name bound to either."""
    if _named(expr):
        assert isinstance(expr, cst.Call)
        yield value, expr
        return
    if depth <= 0:
        return
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "items" \
            and not expr.args:
        for held in model.values.of(value.module, expr.func.value, value.scope, value.frame, at=value.at):
            if isinstance(held.node, cst.CSTNode):
                yield from _named_into_dict(model, held, held.node, depth - 1)
        return
    if isinstance(expr, cst.Name):
        for held in model.values.of(value.module, expr, value.scope, value.frame, at=value.at):
            if isinstance(held.node, cst.BaseExpression) and held.node is not expr:
                yield from _named_pairs(model, held, held.node, depth - 1)


def _first_target(target: cst.BaseExpression) -> str | None:
    """`k` of `for k, v in ...`."""
    if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2 \
            and isinstance(target.elements[0].value, cst.Name):
        return target.elements[0].value.value
    return None


def _uses(expr: cst.BaseExpression, name: str) -> bool:
    """`name` itself, or a text spelled from it (`f"{name}.weight"`, `prefix + name`)."""
    if isinstance(expr, cst.Name):
        return expr.value == name
    if isinstance(expr, (cst.FormattedString, cst.BinaryOperation)):
        return any(isinstance(n, cst.Name) and n.value == name for n in expressions(expr))
    return False
