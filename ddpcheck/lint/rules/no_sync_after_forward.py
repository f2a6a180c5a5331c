from __future__ import annotations

from typing import Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.ddp import is_ddp
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import dotted
from ddpcheck.lint.rule import Invalid, Rule


class NoSyncAfterForward(Rule):
    """`with model.no_sync():` holds the backward but not the forward, so the gradients are all-reduced anyway.

    DDP decides whether a backward pass synchronises gradients when the forward pass runs: its
    `forward` reads `require_backward_grad_sync` and, when it is true, prepares the reducer for the
    coming backward. `no_sync()` only sets that flag to False for the duration of the block. A
    forward that ran before the block already armed the all-reduce; the backward inside the block
    performs it.

    ## Why it matters
    Gradient accumulation written this way pays for an all-reduce on every micro-batch — exactly
    what `no_sync()` was meant to save — and nothing says so. PyTorch's own docstring of
    `no_sync` warns: "The forward pass should be included inside the context manager, or else
    gradients will still be synchronized." (torch 2.13, `DistributedDataParallel.no_sync`).

    Reported at the `with` when its block calls `backward()` and nothing in it can run the DDP
    model's forward (no call of the model, no call that is given the model or that runs project
    code), while the same function calls the model before the block, outside any `no_sync()`,
    on every path that reaches the block — itself, or through a project function it hands the
    model to and that calls it (`loss = compute_loss(batch, model)`). A `with
    contextlib.ExitStack() as stack:` whose block enters `stack.enter_context(model.no_sync())`
    is such a block.

    ## How to fix
    Move the forward (and the loss computation) into the block:
    `with model.no_sync(): loss = criterion(model(x), y); loss.backward()`.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
    """

    code = "DDP030"
    name = "no-sync-after-forward"
    severity = Severity.WARNING
    MESSAGE = (
        "the forward ran before `no_sync()`: DDP arms the gradient all-reduce at forward time, so "
        "this backward still synchronises; run the forward inside the `with` block"
    )

    VALID = [
        """
        for i, (x, y) in enumerate(loader):
            if (i + 1) % accum != 0:
                with model.no_sync():
                    loss = criterion(model(x), y) / accum
                    loss.backward()
            else:
                loss = criterion(model(x), y) / accum
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        # The forward runs in a step function that is handed the model.
        for i, batch in enumerate(loader):
            with model.no_sync():
                loss = compute_loss(model, batch)
                loss.backward()
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(net, device_ids=[local_rank])
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / accum
                if (i + 1) % accum != 0:
                    with model.no_sync():
                        loss.backward()
                else:
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            lines=(8,),
        ),
        Invalid(
            """
            # AMP: the scaled backward is inside, the forward is not.
            def train_one_epoch(model, loader, optimizer, scaler, accum):
                for step, batch in enumerate(loader):
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        out = model(batch["input"])
                        loss = out.loss / accum
                    with model.no_sync():
                        scaler.scale(loss).backward()
            """,
            lines=(7,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        sites = list(model.paths.sites())
        reported: set[int] = set()
        for with_node, receiver, site in self._no_sync_blocks(sites):
            if id(with_node) in reported:
                continue
            inside = [s for s in sites if s.module is site.module and with_node in s.withs]
            if not any(s.method == "backward" for s in inside):
                continue
            name = dotted(receiver)
            if name is None or any(self._may_forward(s, name) for s in inside):
                continue
            if not any(self._forward_before(s, site, name) for s in sites if s.module is site.module):
                continue

            reported.add(id(with_node))
            self.report(with_node.items[0], module=site.module, related=model.paths.chain(site))

    def _no_sync_blocks(self, sites: list[CallSite]) -> Iterator[tuple[cst.With, cst.BaseExpression, CallSite]]:
        """(with statement, the object it calls no_sync on, the no_sync call) for every
        `with X.no_sync():`."""
        seen: set[tuple[int, str | None]] = set()  # (with, the model): one ExitStack may enter several
        for site in sites:
            if site.method != "no_sync":
                continue
            stack = self._entered_on(site, sites)
            for with_node in site.module.withs:
                if (id(with_node), dotted(site.receiver) if site.receiver is not None else None) in seen:
                    continue
                if not any(item.item is site.node or stack is not None and item.asname is not None
                           and dotted(item.asname.name) == stack and with_node in site.withs
                           for item in with_node.items):
                    continue
                seen.add((id(with_node), dotted(site.receiver) if site.receiver is not None else None))
                receiver = site.receiver
                assert receiver is not None
                # Only DDP has `no_sync`; a parameter or unknown value holding it is taken at
                # its word, a value known to be something else is not.
                values = self.model.values.at_call(site, receiver)
                if any(is_ddp(self.model, v) for v in values) or all(v.call is None for v in values):
                    yield with_node, receiver, site

    @staticmethod
    def _entered_on(site: CallSite, sites: list[CallSite]) -> str | None:
        """`stack.enter_context(model.no_sync())` inside `with contextlib.ExitStack() as stack:`:
        the stack's name (the block that stack's `with` covers runs without synchronisation)."""
        for other in sites:
            if other.scope is site.scope and other.method == "enter_context" and other.receiver is not None \
                    and any(a.value is site.node for a in other.node.args):
                return dotted(other.receiver)
        return None

    def _passes_to_forward(self, call: CallSite, name: str) -> bool:
        """`loss = compute_loss(batch, model=model)`: a project function given the model that
        calls it (`model(x)`) in its own body."""
        for callee, bound in self.model.graph.targets(call):
            for param in callee.params():
                passed = self.model.graph.argument_for(call, callee, param, bound)
                if isinstance(passed, cst.BaseExpression) and dotted(passed) == name and any(
                        c.dotted in (param.name, f"{param.name}.forward")
                        for c in callee.module.calls_in(callee.qualname)):
                    return True
        return False

    def _forward_before(self, forward: CallSite, no_sync: CallSite, name: str) -> bool:
        """`forward` calls the model earlier in the same function, outside any `no_sync`, and
        runs whenever the block does (every `if` around it is around the block too)."""
        if forward.scope is not no_sync.scope or forward.index >= no_sync.index:
            return False
        if dotted(forward.node.func) != name and not self._passes_to_forward(forward, name):
            return False
        if any(isinstance(i.item, cst.Call) and isinstance(i.item.func, cst.Attribute)
               and i.item.func.attr.value == "no_sync" for w in forward.withs for i in w.items):
            return False
        arms = {(id(g.node), g.negated) for g in no_sync.guards}
        return all((id(g.node), g.negated) in arms for g in forward.guards)

    def _may_forward(self, site: CallSite, name: str) -> bool:
        """Whether a call inside the block may run the model's forward."""
        func = site.node.func
        if dotted(func) in (name, f"{name}.forward", f"{name}.module"):
            return True
        if any(dotted(a.value) == name for a in site.node.args):
            return True
        if self.model.graph.targets(site):
            return True  # project code: may use the model (a trainer's self.model)
        if site.method in ("backward", "scale", "item", "mean", "sum", "detach", "float", "no_sync", "enter_context"):
            return False
        if self.model.api(site) is not None:
            return False  # a torch (or other library) function
        if isinstance(func, cst.Name) or isinstance(func, cst.Attribute):
            values = self.model.values.at_call(site, func)
            return not values or any(v.call is None or self.model.api_of(v) is None for v in values)
        return True
