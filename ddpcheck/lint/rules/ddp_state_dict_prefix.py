from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.context import CallSite
from ddpcheck.lint.names import dotted
from ddpcheck.lint.patterns import subexpressions
from ddpcheck.lint.rule import Invalid, Replace, Rule
from ddpcheck.lint.values import origins
from ddpcheck.lint.wraps import ddp_wraps, visible_from

_SAVE = frozenset({"torch.save"})


class DdpStateDictPrefix(Rule):
    """A checkpoint saves the DDP wrapper's `state_dict()`, whose keys all start with `module.`.

    `DistributedDataParallel` holds the model as its `module` attribute, so
    `ddp_model.state_dict()` names every tensor `module.<name>`. A checkpoint written that way
    does not load into the plain model used for inference, fine-tuning or a single-GPU resume.

    ## Why it matters
    Loading it later fails with `Missing key(s) in state_dict: "conv1.weight", ... Unexpected
    key(s) in state_dict: "module.conv1.weight", ...`, or, with `strict=False`, silently loads
    nothing and evaluates a randomly initialised model.

    Informational, since a project may always load into a DDP model. Not reported when the file
    loads checkpoints into the DDP model itself, strips the prefix (`"module."` appears in the
    file, or `consume_prefix_in_state_dict_if_present` is used), or saves
    `ddp_model.module.state_dict()`.

    ## How to fix
    Save `ddp_model.module.state_dict()` (the fix does that; unsafe, since it changes the
    checkpoint's keys), or strip the prefix on load with
    `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")`.

    ## References
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP019"
    name = "ddp-state-dict-prefix"
    severity = Severity.INFO
    fixable = True

    VALID = [
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp_model = DDP(model, device_ids=[rank])
        if rank == 0:
            torch.save(ddp_model.module.state_dict(), "model.pt")
        """,
        """
        # Saved before wrapping, or the plain model under another name.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.save(model.state_dict(), "init.pt")
        model = DDP(model)
        torch.save({"model": model_without_ddp.state_dict()}, "ckpt.pt")
        """,
        """
        # Round trip through the DDP model: consistent.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        model.load_state_dict(torch.load("ckpt.pt", map_location="cpu"))
        torch.save(model.state_dict(), "ckpt.pt")
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            ddp_model = DDP(model, device_ids=[rank])
            torch.save(ddp_model.state_dict(), "model.pt")
            """,
            line=4,
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            ddp_model = DDP(model, device_ids=[rank])
            torch.save(ddp_model.module.state_dict(), "model.pt")
            """,
        ),
        """
        import torch
        model = torch.nn.parallel.DistributedDataParallel(model)
        state = {"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}
        torch.save(state, path)
        """,
        Invalid(
            """
            # Resumed into the plain model before wrapping: the saved prefix will not load back.
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model.load_state_dict(torch.load("last.pt", map_location="cpu"))
            model = DDP(model)
            torch.save(model.state_dict(), "last.pt")
            """,
            line=6,
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._saves: list[tuple[int, CallSite]] = []

    def on_call(self, call: CallSite) -> None:
        if call.qualname in _SAVE:
            self._saves.append((len(self.ctx.calls) - 1, call))

    def finish(self) -> None:
        if not self._saves:
            return
        source = self.ctx.source
        if "'module.'" in source or '"module."' in source or "consume_prefix_in_state_dict" in source:
            return
        wraps = [w for w in ddp_wraps(self.ctx) if w.outer]
        if not wraps:
            return
        outers = {w.outer for w in wraps}
        wrapped_at = {}
        for w in wraps:
            wrapped_at.setdefault(w.outer, w.index)
        if any(c.method == "load_state_dict" and c.receiver in outers and i > wrapped_at[c.receiver]
               for i, c in enumerate(self.ctx.calls)):
            return  # checkpoints are loaded into the DDP model: the prefix round-trips
        for index, call in self._saves:
            obj = call.arg("obj", 0)
            if obj is None:
                continue
            for value in origins(self.ctx, obj, call.scope):
                # Plain isinstance checks: importing libcst.matchers costs more than a lint run.
                for sd in subexpressions(value):
                    if not (isinstance(sd, cst.Call) and isinstance(sd.func, cst.Attribute)
                            and sd.func.attr.value == "state_dict"):
                        continue
                    receiver = dotted(sd.func.value)
                    wrap = next((w for w in wraps if w.outer == receiver and w.index < index
                                 and visible_from(receiver, w.call.scope, call.scope)), None)
                    if wrap is None:
                        continue
                    new = sd.with_changes(
                        func=sd.func.with_changes(value=cst.Attribute(sd.func.value, cst.Name("module")))
                    )
                    self.report(
                        sd,
                        f"`{receiver}.state_dict()` of the DDP model saves every key with a `module.` "
                        f"prefix, which the plain model cannot load; save `{receiver}.module.state_dict()`",
                        Replace(sd, new, f"Save `{receiver}.module.state_dict()`"),
                    )
