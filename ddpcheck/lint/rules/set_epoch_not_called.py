from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.context import DATALOADER, DISTRIBUTED_SAMPLER, CallSite, Scope
from ddpcheck.lint.names import dotted
from ddpcheck.lint.rule import Invalid, Replace, Rule
from ddpcheck.lint.values import origins

# Calls that take a loader without iterating it.
_NOT_ITERATING = {"len", "print", "isinstance", "hasattr", "getattr", "type", "id", "str", "repr"}


@dataclass
class _Feed:
    """A shuffling DistributedSampler and the loader it feeds."""

    sampler: cst.Call
    sampler_names: list[str]
    loader_names: list[str]
    via_batch_sampler: bool
    scope: Scope


class SetEpochNotCalled(Rule):
    """A shuffling DistributedSampler never gets `set_epoch(epoch)`, so every epoch reuses one order.

    ## Why it matters
    `DistributedSampler` seeds its shuffle with `seed + epoch`, and the epoch only changes when you
    call `sampler.set_epoch(epoch)`. Without it every epoch visits the samples in exactly the same
    order on every rank: the shuffle you asked for happens once. Nothing fails; the loss curve is
    just a little worse than the same run on one GPU, and runs differ from what `shuffle=True`
    promises. PyTorch's documentation calls this out: "calling the set_epoch() method at the
    beginning of each epoch before creating the DataLoader iterator is necessary to make
    shuffling work properly across multiple epochs. Otherwise, the same ordering will be always
    used."

    Reported when a `DistributedSampler` whose `shuffle` is not `False` (it defaults to `True`)
    feeds a `DataLoader` (as `sampler=` or inside `batch_sampler=`) that is iterated inside a loop,
    or passed to a function inside a loop, and no `set_epoch(...)` is called on the sampler: not
    through its variable, nor through `loader.sampler` / `loader.batch_sampler.sampler`, nor on
    any object this rule cannot tell apart from it (a function parameter, for instance).

    ## How to fix
    Call `sampler.set_epoch(epoch)` as the first statement of the epoch loop, before iterating
    the loader. The fix (unsafe: it changes the order of samples) inserts exactly that.

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    - https://github.com/pytorch/pytorch/issues/31771 (DistributedSampler can't shuffle the dataset)
    - https://github.com/pytorch/examples/issues/501
    """

    code = "DDP002"
    name = "set-epoch-not-called"
    severity = Severity.WARNING
    fixable = True
    MESSAGE = (
        "DistributedSampler shuffles but `set_epoch` is never called on it: every epoch reuses the "
        "same order; call `{sampler}.set_epoch(epoch)` at the start of each epoch"
    )

    VALID = [
        """
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for batch in loader:
                step(batch)
        """,
        """
        # Through the loader, with fully dotted names.
        import torch
        torch.distributed.init_process_group("gloo")
        loader = torch.utils.data.DataLoader(
            dataset, sampler=torch.utils.data.distributed.DistributedSampler(dataset))
        for epoch in range(10):
            loader.sampler.set_epoch(epoch)
            for i, batch in enumerate(loader):
                step(batch)
        """,
        """
        # Through a batch sampler.
        from torch.utils.data import BatchSampler, DataLoader, DistributedSampler as DS
        sampler = DS(dataset)
        loader = DataLoader(dataset, batch_sampler=BatchSampler(sampler, 32, drop_last=True))
        for epoch in range(10):
            loader.batch_sampler.sampler.set_epoch(epoch)
            for batch in loader:
                step(batch)
        """,
        """
        # shuffle=False: the order is fixed on purpose.
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(dataset, shuffle=False)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(10):
            for batch in loader:
                step(batch)
        """,
        """
        # set_epoch inside a helper that gets the sampler (or loader) as a parameter.
        from torch.utils.data import DataLoader, DistributedSampler
        def train_one_epoch(model, loader, epoch):
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                model(batch)
        sampler = DistributedSampler(dataset)
        train_loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(10):
            train_one_epoch(model, train_loader, epoch)
        """,
        """
        # A sampler chosen by a flag, set_epoch guarded by the same flag.
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(dataset) if args.distributed else None
        loader = DataLoader(dataset, sampler=sampler, shuffle=sampler is None)
        for epoch in range(args.epochs):
            if args.distributed:
                sampler.set_epoch(epoch)
            for batch in loader:
                step(batch)
        """,
        """
        # Iterated once, not in an epoch loop: the epoch never changes.
        from torch.utils.data import DataLoader, DistributedSampler
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        for batch in loader:
            step(batch)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler

            dist.init_process_group("gloo")
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(2):
                for batch in loader:
                    step(batch)
            """,
            line=5,
            fixed="""
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler

            dist.init_process_group("gloo")
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(2):
                sampler.set_epoch(epoch)
                for batch in loader:
                    step(batch)
            """,
        ),
        Invalid(
            """
            import torch
            def main():
                loader = torch.utils.data.DataLoader(
                    ds, sampler=torch.utils.data.DistributedSampler(ds, shuffle=True))
                for ep in range(3):
                    for step, batch in enumerate(loader):
                        train(batch)
            """,
            line=4,
            fixed="""
            import torch
            def main():
                loader = torch.utils.data.DataLoader(
                    ds, sampler=torch.utils.data.DistributedSampler(ds, shuffle=True))
                for ep in range(3):
                    loader.sampler.set_epoch(ep)
                    for step, batch in enumerate(loader):
                        train(batch)
            """,
        ),
        Invalid(
            """
            # The loader is iterated in a function that also runs the epochs: the fix reaches
            # the sampler through the loader, the name visible there.
            from torch.utils.data import DataLoader, DistributedSampler
            def fit(model, loader, epochs):
                for epoch in range(epochs):
                    for batch in loader:
                        model(batch)
            def main():
                sampler = DistributedSampler(dataset)
                loader = DataLoader(dataset, sampler=sampler)
                fit(model, loader, 10)
            """,
            line=9,
            fixed="""
            # The loader is iterated in a function that also runs the epochs: the fix reaches
            # the sampler through the loader, the name visible there.
            from torch.utils.data import DataLoader, DistributedSampler
            def fit(model, loader, epochs):
                for epoch in range(epochs):
                    loader.sampler.set_epoch(epoch)
                    for batch in loader:
                        model(batch)
            def main():
                sampler = DistributedSampler(dataset)
                loader = DataLoader(dataset, sampler=sampler)
                fit(model, loader, 10)
            """,
        ),
        Invalid(
            """
            # The epoch loop hands the loader to a function; the other sampler's set_epoch
            # does not count for this one.
            from torch.utils.data import DataLoader, DistributedSampler
            train_sampler = DistributedSampler(train_set)
            aux_sampler = DistributedSampler(aux_set)
            train_loader = DataLoader(train_set, sampler=train_sampler)
            aux_loader = DataLoader(aux_set, sampler=aux_sampler)
            for epoch in range(10):
                aux_sampler.set_epoch(epoch)
                train_one_epoch(model, train_loader)
                for batch in aux_loader:
                    step(batch)
            """,
            line=4,
        ),
    ]

    def finish(self) -> None:
        feeds = [feed for call in self.ctx.calls_to(DATALOADER) if (feed := self._feed(call))]
        if not feeds:
            return
        set_epoch_receivers = [
            c.receiver for c in self.ctx.calls if c.method == "set_epoch"
        ]
        for feed in feeds:
            others = self._names_of_others(feed, feeds)
            if any(r is None or r not in others for r in set_epoch_receivers):
                continue  # some set_epoch may well be this sampler's
            found = self._epoch_loop(feed)
            if found is None:
                continue
            loop, scope, loader = found
            expression = self._sampler_expression(feed, scope, loader)
            self.report(
                feed.sampler,
                self.MESSAGE.format(sampler=expression),
                fix=self._fix(loop, expression),
            )

    # --- what feeds what ---------------------------------------------------------------------
    def _feed(self, call: CallSite) -> _Feed | None:
        loader_names = self.ctx.assigned_names(call.node)
        if not loader_names:
            return None
        via_batch = False
        sampler_arg = call.arg("sampler", 3)
        if sampler_arg is None:
            sampler_arg = call.arg("batch_sampler", 4)
            via_batch = True
        if sampler_arg is None:
            return None
        sampler_call, names = self._distributed_sampler(call.scope, sampler_arg, via_batch)
        if sampler_call is None:
            return None
        shuffle = _arg(sampler_call, "shuffle", 3)
        if shuffle is not None and not (isinstance(shuffle, cst.Name) and shuffle.value == "True"):
            return None  # shuffle=False, or a flag we cannot evaluate
        return _Feed(sampler_call, names, loader_names, via_batch, call.scope)

    def _distributed_sampler(self, scope: Scope, expr: cst.BaseExpression, via_batch: bool):
        names = []
        for value in origins(self.ctx, expr, scope):
            name = dotted(value)
            if name is not None:
                names.append(name)
                continue
            if not isinstance(value, cst.Call):
                continue
            q = self.ctx.qualname(value.func)
            if q == DISTRIBUTED_SAMPLER:
                return value, names + self.ctx.assigned_names(value)
            if via_batch and value.args:
                # BatchSampler(sampler, ...): look at the sampler it wraps.
                inner = _arg(value, "sampler", 0)
                if inner is not None:
                    found, inner_names = self._distributed_sampler(scope, inner, False)
                    if found is not None:
                        return found, inner_names
        return None, []

    def _names_of_others(self, feed: _Feed, feeds: list[_Feed]) -> set[str]:
        """Receivers that certainly mean another sampler than `feed`'s."""
        others: set[str] = set()
        mine = set(feed.sampler_names) | _via_loader(feed.loader_names)
        for other in feeds:
            if other is not feed and other.sampler is not feed.sampler:
                others |= set(other.sampler_names) | _via_loader(other.loader_names)
        return others - mine

    def _epoch_loop(self, feed: _Feed) -> tuple[cst.CSTNode, Scope, str] | None:
        """The innermost loop around an iteration of the loader (or a call handed the loader),
        the scope it is in, and the name the loader has there."""
        names = set(feed.loader_names)
        for site in self.ctx.fors:
            if site.loops:
                used = _loader_in(site.node.iter, names)
                if used is not None:
                    return site.loops[-1], site.scope, used
        for call in self.ctx.calls:
            if call.loops and call.dotted not in _NOT_ITERATING:
                for a in call.node.args:
                    if dotted(a.value) in names:
                        return call.loops[-1], call.scope, dotted(a.value)
        return None

    def _sampler_expression(self, feed: _Feed, scope: Scope, loader: str) -> str:
        """How code in the epoch loop's scope reaches the sampler: its own name where that is
        visible there, else through the loader."""
        for name in feed.sampler_names:
            if _visible(scope, name.split(".", 1)[0]) and scope.lookup(name):
                return name
        return f"{loader}.batch_sampler.sampler" if feed.via_batch_sampler else f"{loader}.sampler"

    def _fix(self, loop: cst.CSTNode, expression: str) -> Replace | None:
        if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name):
            return None
        if not isinstance(loop.body, cst.IndentedBlock):
            return None
        statement = cst.parse_statement(f"{expression}.set_epoch({loop.target.value})\n")
        body = loop.body.with_changes(body=(statement, *loop.body.body))
        return Replace(loop, loop.with_changes(body=body), f"Call `{expression}.set_epoch(...)` each epoch")


def _arg(call: cst.Call, keyword: str, position: int) -> cst.BaseExpression | None:
    positional = 0
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value == keyword:
                return a.value
        elif not a.star:
            if positional == position:
                return a.value
            positional += 1
    return None


def _via_loader(loader_names: list[str]) -> set[str]:
    return {f"{n}.sampler" for n in loader_names} | {f"{n}.batch_sampler.sampler" for n in loader_names}


def _loader_in(expr: cst.BaseExpression, names: set[str]) -> str | None:
    """The loader iterated by `loader`, `enumerate(loader)`, `tqdm(loader, ...)`, `zip(loader, other)`."""
    name = dotted(expr)
    if name in names:
        return name
    if isinstance(expr, cst.Call):
        for a in expr.args:
            found = _loader_in(a.value, names)
            if found is not None:
                return found
    return None


def _visible(scope: Scope | None, name: str) -> bool:
    """Whether `name` is bound (assigned, or a parameter) in `scope` or a scope around it."""
    while scope is not None:
        if name in scope.assignments:
            return True
        scope = scope.parent
    return False
