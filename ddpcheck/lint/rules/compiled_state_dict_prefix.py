from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from ddpcheck.findings import Applicability, Severity
from ddpcheck.lint.model.module import CallSite, ModuleModel
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Replace, Rule
from ddpcheck.lint.rules._checkpoints import loaded_through_stripper, project_strips, strips_module_prefix
from ddpcheck.lint.rules._wrappers import (
    DEPTH,
    Stack,
    attribute_chain,
    saved_state_dicts,
    stacks_of,
    unwrap,
)

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model


class CompiledStateDictPrefix(Rule):
    """A checkpoint saves the `state_dict()` of a `torch.compile`d model, whose keys all start with `_orig_mod.`.

    `torch.compile(model)` returns an `OptimizedModule` that holds the original as its submodule
    `_orig_mod` (torch 2.13, `torch/_dynamo/eval_frame.py`), so its `state_dict()` names every
    parameter `_orig_mod.<name>` — `_orig_mod.module.<name>` when the DDP model was compiled, and
    `module._orig_mod.` after `DDP(compiled).state_dict()` (see DDP019 for `module.`).

    ## Why it matters
    The checkpoint loads only into a model compiled the same way: loading it into the plain model
    for evaluation, export or fine-tuning fails with "Unexpected key(s) in state_dict:
    _orig_mod...", and a run resumed without `--compile` cannot read its own checkpoints.

    Reported at `x.state_dict()` inside a `torch.save(...)` when `x` is (on some path) a compiled
    module after the `.module` / `._orig_mod` steps written (also where the step is written
    where the receiver is made: `net = model.module if distributed else model`, then `state =
    net.state_dict()` saved as `{"model": state}`), unless the file strips the prefix
    itself, the loaded state dict goes through a project function that strips it, or a script
    beside the file or below its folder loads checkpoints and strips it (an inference or export
    script); for the compiled DDP model, whose keys start with `_orig_mod.module.`, the project
    must strip the wrapper's `module.` too (a loader that drops only `_orig_mod.` leaves it).
    `model.compile()` (the in-place method) keeps the keys and is not reported, nor is a
    save in the branch of a non-distributed mode (`model.module.state_dict() if args.distributed
    else model.state_dict()` where only the single-process run compiles), nor a `torch.compile`
    made only on the non-distributed path (`if not distributed: model = torch.compile(model)`):
    the distributed run never saves that module.

    ## How to fix
    Save the module inside: `model._orig_mod.state_dict()` for `torch.compile(model)`,
    `model.module.state_dict()` for `torch.compile(DDP(model))` (the compiled wrapper forwards
    `.module` to DDP's), `ddp.module._orig_mod.state_dict()` for `DDP(torch.compile(model))`.
    The fix inserts that step; it is unsafe because loaders that expect the prefix (a resume
    into the compiled model) must then load into the inner module too.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.compile.html
    - https://github.com/pytorch/pytorch/issues/101107 (state_dict of a compiled model has `_orig_mod.` keys)
    - https://github.com/karpathy/nanoGPT/issues/325 (resuming fails on the prefix)
    - https://github.com/huggingface/pytorch-image-models/pull/2003 (resuming a compiled checkpoint;
      the DDP + compile question `_orig_mod.module.` or `_orig_mod.`)
    - https://github.com/meta-pytorch/tnt/pull/441 (in-place `Module.compile()` keeps the keys)
    """

    code = "DDP024"
    name = "compiled-state-dict-prefix"
    severity = Severity.INFO
    fixable = True
    MESSAGE = (
        "`{receiver}.{method}()` of a compiled model saves every key with a `{prefix}` prefix, "
        "which the plain model cannot load; save `{fixed}.{method}()`"
    )

    VALID = [
        """
        import torch
        model = torch.compile(Net().cuda())
        torch.save(model._orig_mod.state_dict(), "model.pt")
        """,
        """
        # nn.Module.compile() compiles in place and keeps the keys.
        import torch
        model = Net().cuda()
        model.compile()
        torch.save(model.state_dict(), "model.pt")
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            model = Net().cuda()
            if args.compile:
                model = torch.compile(model)
            for epoch in range(args.epochs):
                train_one_epoch(model, loader)
                torch.save({"model": model.state_dict(), "epoch": epoch}, "ckpt.pt")
            """,
            lines=(7,),
            fixed="""
            import torch
            model = Net().cuda()
            if args.compile:
                model = torch.compile(model)
            for epoch in range(args.epochs):
                train_one_epoch(model, loader)
                torch.save({"model": model._orig_mod.state_dict(), "epoch": epoch}, "ckpt.pt")
            """,
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = torch.compile(DDP(Net().to(rank), device_ids=[rank]))
            if rank == 0:
                torch.save(model.state_dict(), "final.pt")
            """,
            lines=(5,),
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = torch.compile(DDP(Net().to(rank), device_ids=[rank]))
            if rank == 0:
                torch.save(model.module.state_dict(), "final.pt")
            """,
        ),
    ]

    def finish(self) -> None:
        model = self.model
        found: list[tuple[cst.Call, cst.Attribute, Stack, bool, ModuleModel, CallSite]] = []
        for save, value, sd, where in saved_state_dicts(model):
            if not isinstance(sd.func, cst.Attribute):
                continue  # (saved_state_dicts yields `x.state_dict()` / `x.named_parameters()` calls only)
            if model.paths.single_only(where) or model.paths.single_only(save):
                continue  # the branch of a script's non-distributed mode: outside what this checks
            for stack in _receiver_stacks(model, where, sd.func.value):
                if stack and stack[0] == "compile":
                    found.append((sd, sd.func, stack, value.module is model.root, value.module, save))
                    break
        if not found:
            return
        # The compiled DDP model's keys start with `_orig_mod.module.`: a loader that drops only
        # `_orig_mod.` still leaves `module.`, which the plain model cannot load either. Its
        # checkpoints are read back only where the project also drops the wrapper's prefix.
        compiled_ddp = [report for report in found if report[2][1:2] == ("ddp",)]
        found = [report for report in found if report[2][1:2] != ("ddp",)]
        if compiled_ddp and self._strips(_strips_prefix) and self._strips(strips_module_prefix):
            compiled_ddp = []
        if found and self._strips(_strips_prefix):
            found = []  # the project's loading code removes the prefix (an inference script's renaming)
        for report in [*found, *compiled_ddp]:
            self._report(*report)

    def _strips(self, strips: Callable[[str], bool]) -> bool:
        """The file itself, or the project's loading code, names the prefix `strips` tests for."""
        model = self.model
        return strips(model.root.source) or loaded_through_stripper(model, strips) or project_strips(model, strips)

    def _report(self, sd: cst.Call, func: cst.Attribute, stack: Stack, own: bool, module: ModuleModel,
                save: CallSite) -> None:
        receiver_node = func.value
        receiver = " ".join(self.model.root.code(receiver_node).split()) if own else "model"
        step = "module" if stack[1:2] == ("ddp",) else "_orig_mod"
        prefix = "_orig_mod.module." if step == "module" else "_orig_mod."
        fixed = f"{receiver}.{step}"
        fix = None
        if own and isinstance(receiver_node, (cst.Name, cst.Attribute)):  # (not each arm of `a if c else b`)
            new = sd.with_changes(func=func.with_changes(value=cst.Attribute(receiver_node, cst.Name(step))))
            fix = Replace(sd, new, f"Save `{fixed}.{func.attr.value}()`", Applicability.UNSAFE)
        self.report(sd, self.MESSAGE.format(receiver=receiver, prefix=prefix, fixed=fixed, method=func.attr.value), fix,
                    module=module, related=self.model.paths.chain(save))


def _receiver_stacks(model: Model, site: CallSite, expr: cst.BaseExpression) -> list[Stack]:
    """The wrapper stacks `expr` (at `site`) may hold once its `.module` / `._orig_mod` steps are
    taken, also where a step is written where the value is made: `net = model.module`, or an
    arm of `(model.module if distributed else model)`."""
    base, chain = attribute_chain(expr)
    out: list[Stack] = []
    for stack in _held(model, model.values.at_call(site, base), DEPTH):
        for step in chain:
            if stack is None:
                break
            stack = unwrap(stack, step.attr.value)
        if stack is not None and stack not in out:
            out.append(stack)
    return out


def _held(model: Model, values: list[Value], depth: int) -> list[Stack | None]:
    """The stacks of `values`, a leaf that is itself `x.module` / `x._orig_mod` read as the
    stacks of `x` after those steps."""
    out: list[Stack | None] = []
    for value in values:
        node = value.node
        inner, chain = attribute_chain(node) if isinstance(node, cst.Attribute) else (node, [])
        if not chain or depth <= 0:
            out += stacks_of(model, [value])
            continue
        assert isinstance(inner, cst.BaseExpression)
        for stack in _held(model, model.values.of(value.module, inner, value.scope, value.frame, at=value.at),
                           depth - 1):
            for step in chain:
                if stack is None:
                    break
                stack = unwrap(stack, step.attr.value)
            out.append(stack)
    return out


def _strips_prefix(code: str) -> bool:
    """The code names the compiled module's key prefix (`key.replace("_orig_mod.", "")`)."""
    return "_orig_mod." in code
