from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.conditions import contradictory
from ddpcheck.lint.model.ddp import is_optimizer_step
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.rule import Invalid, Rule


class OptimizerStepInsideNoSync(Rule):
    """`optimizer.step()` runs inside a DDP `no_sync()` block, on gradients that were never all-reduced.

    ## Why it matters
    Under `no_sync()` DDP skips the gradient all-reduce; the gradients of that backward stay
    local and are synchronized only by the first backward *outside* the block. A step taken
    inside the block updates each replica with its own local gradients: the replicas silently
    diverge, and the loss still goes down on every rank.

    Reported at the step inside a `with` whose context may be a DDP `no_sync()`. A context chosen
    by branch (`cm = model.no_sync()` on the accumulation steps, `cm = nullcontext()` on the
    update step) is `no_sync()` only where its branch can run together with the step's own test:
    a step under `if step % k == k - 1:` in the `with cm:` of `cm = model.no_sync() if not (step %
    k == k - 1) else nullcontext()` runs in the `nullcontext()` and is not reported.

    ## How to fix
    Keep only the forward and backward of the non-final micro-batches inside `no_sync()`; run the
    final micro-batch's backward outside it and call `optimizer.step()` after that.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
      (the example: accumulate under `no_sync`, then a synchronized backward before the step)
    """

    code = "DDP021"
    name = "optimizer-step-inside-no-sync"
    severity = Severity.ERROR
    MESSAGE = (
        "optimizer step inside `no_sync()` uses gradients that were never all-reduced, so the "
        "replicas diverge; move the step (and the final backward) outside the `no_sync()` block"
    )

    VALID = [
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model)
        with ddp.no_sync():
            for x in micro_batches[:-1]:
                ddp(x).sum().backward()
        ddp(micro_batches[-1]).sum().backward()
        optimizer.step()
        """,
        """
        # A scheduler step inside no_sync does not touch gradients.
        with model.no_sync():
            model(x).sum().backward()
            scheduler.step()
        """,
    ]
    INVALID = [
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            ddp = DDP(model)
            for x in loader:
                with ddp.no_sync():
                    ddp(x).sum().backward()
                    optimizer.step()
            """,
            lines=(6,),
        ),
        Invalid(
            """
            ctx = model.no_sync()
            with ctx:
                loss.backward()
                scaler.step(optimizer)
            """,
            lines=(4,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        for site in model.paths.sites():
            if not site.withs or site.method != "step" or not is_optimizer_step(model, site):
                continue
            if any(self._is_no_sync(site, item.item) for w in site.withs for item in w.items):
                self.report(site.node, module=site.module, related=model.paths.chain(site))

    def _is_no_sync(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """The context entered around `site` may be a `no_sync()`: a context chosen by branch
        (`cm = model.no_sync()` when the step is not due, `nullcontext()` otherwise) is one only
        where the branch that makes it can run with the step's own guards (`if step_due:`)."""
        for value in self.model.values.at_call(site, expr):
            call = value.call
            if call is not None and isinstance(call.func, cst.Attribute) and call.func.attr.value == "no_sync":
                if value.scope is site.scope and contradictory(value.conditions, site.guards):
                    continue
                return True
        return False
