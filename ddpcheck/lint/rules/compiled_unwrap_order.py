from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.module import ModuleModel, Point, Scope
from ddpcheck.lint.model.syntax import subexpressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._wrappers import UNKNOWN, attribute_chain, stacks_of, unwrap


class CompiledUnwrapOrder(Rule):
    """`._orig_mod` is taken from a DDP wrapper (or after `.module` already reached the plain model): the wrappers are unwrapped in the wrong order.

    `torch.compile` and `DistributedDataParallel` each put the model one attribute deeper:
    `DDP(torch.compile(net))` is unwrapped with `.module._orig_mod`, `torch.compile(DDP(net))` with
    `._orig_mod.module` (or just `.module`, which the compiled wrapper forwards to DDP's in torch
    2.13). `ddp._orig_mod` asks a DDP wrapper for an attribute only compiled modules have.

    ## Why it matters
    The line raises `AttributeError: 'DistributedDataParallel' object has no attribute
    '_orig_mod'` (or `'Net' object has no attribute '_orig_mod'`) — typically in the checkpoint
    or evaluation code that runs once per epoch, hours into the job, and only when `--compile`
    and DDP are both on.

    Reported at the `._orig_mod` step when, on some path, the object before it is a DDP wrapper
    or the plain model (followed through assignments, `torch.compile(...)` and `DDP(...)`), and
    no `hasattr(x, "_orig_mod")` test guards it. An object the model cannot follow
    (`getattr(self, name)`) is not judged.

    The order of wrapping itself is not reported: in torch 2.13 both orders train correctly and
    both overlap the gradient all-reduce with backward. Dynamo's DDPOptimizer splits the compiled
    graph at DDP's bucket boundaries whenever it compiles code that runs inside a DDP forward
    (`DistributedDataParallel._get_active_ddp_module()`, set by DDP's forward, is what
    `torch/_dynamo/convert_frame.py` checks), which is the case for `torch.compile(DDP(net))` and
    for `DDP(torch.compile(net))` alike. What differs is how to unwrap them (this rule) and the
    keys of their state dicts (DDP024, DDP019).

    ## How to fix
    Unwrap in the reverse order of wrapping: `model.module._orig_mod` for
    `DDP(torch.compile(net))`, `model._orig_mod.module` for `torch.compile(DDP(net))`; or keep a
    reference to the plain model from before wrapping (`raw_model = net`).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.compile.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP025"
    name = "compiled-unwrap-order"
    severity = Severity.ERROR
    MESSAGE = (
        "`{expr}` raises AttributeError: here `{before}` is {what}, which has no `_orig_mod`; "
        "unwrap in the reverse order of wrapping (`{hint}`)"
    )

    VALID = [
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(torch.compile(Net().to(rank)), device_ids=[rank])
        raw = model.module._orig_mod
        """,
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = torch.compile(DDP(Net().to(rank), device_ids=[rank]))
        raw = model._orig_mod.module
        torch.save(model.module.state_dict(), "ckpt.pt")
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = Net().to(rank)
            if args.compile:
                model = torch.compile(model)
            model = DDP(model, device_ids=[rank])
            raw_model = model._orig_mod.module if args.compile else model.module
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = torch.compile(DDP(Net().to(rank), device_ids=[rank]))
            def save(path):
                torch.save(model.module._orig_mod.state_dict(), path)
            """,
            lines=(5,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        root = model.root
        if "_orig_mod" not in root.source:
            return
        seen: set[int] = set()
        for scope, node, point in self._expressions(root):
            for sub in subexpressions(node):
                if not (isinstance(sub, cst.Attribute) and sub.attr.value == "_orig_mod") or id(sub) in seen:
                    continue
                seen.add(id(sub))
                base, chain = attribute_chain(sub)
                if not chain or _checked(root, point, base):
                    continue
                stacks = stacks_of(model, model.values.of(root, base, scope, at=point))
                for stack in sorted(stacks, key=lambda st: "compile" not in st):  # the compiled path first
                    failed = self._fails(stack, chain)
                    if failed is not None:
                        before, what = failed
                        self.report(sub, self.MESSAGE.format(
                            expr=model.text_of(root, sub), before=model.text_of(root, before), what=what,
                            hint=_hint(stack)))
                        break

    @staticmethod
    def _expressions(root: ModuleModel) -> Iterator[tuple[Scope, cst.BaseExpression, Point | None]]:
        """Where attribute chains are written: calls (callee and arguments) and assigned values."""
        for site in root.calls:
            yield site.scope, site.node, site.point
        scopes = [root.module_scope, *root.function_scopes.values()]
        for scope in scopes:
            for name, values in scope.assignments.items():
                points = scope.points.get(name, [])
                for i, value in enumerate(values):
                    if isinstance(value, cst.BaseExpression):
                        yield scope, value, points[i] if i < len(points) else None

    @staticmethod
    def _fails(stack: tuple[str, ...], chain: list[cst.Attribute]) -> tuple[cst.BaseExpression, str] | None:
        current: tuple[str, ...] | None = stack
        for step in chain:
            if current is None or current[:1] == (UNKNOWN,):
                return None
            after = unwrap(current, step.attr.value)
            if after is None:
                what = "the DDP wrapper" if current[:1] == ("ddp",) else "the plain model"
                return step.value, what
            current = after
        return None


def _checked(root: ModuleModel, point: Point | None, base: cst.BaseExpression) -> bool:
    """The code tests for the attribute first (`if hasattr(m, "_orig_mod"): m = m._orig_mod`)."""
    guards = point.guards if point is not None else ()
    return any("hasattr" in root.code(g.test) and "_orig_mod" in root.code(g.test) for g in guards)


def _hint(stack: tuple[str, ...]) -> str:
    steps = [{"ddp": "module", "compile": "_orig_mod"}[w] for w in stack if w in ("ddp", "compile")]
    return "model." + ".".join(steps) if steps else "model"
