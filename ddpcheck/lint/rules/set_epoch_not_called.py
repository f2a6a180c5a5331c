from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint import remedies
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import Feed, feed, is_eval_name, sampler_values, training_scopes, wrapped_iterables
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ModuleModel, Point, Scope, Target
from ddpcheck.lint.model.project import resolved_path
from ddpcheck.lint.model.paths import is_no_grad
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import argument, children, dotted, int_value, is_false, is_none, subexpressions
from ddpcheck.lint.model.values import Frame, Value, Values
from ddpcheck.lint.rule import Invalid, Rule

# Calls that take a loader without iterating it.
_NOT_ITERATING = frozenset({"len", "print", "isinstance", "hasattr", "getattr", "type", "id", "str", "repr"})
_STORES = frozenset({"append", "extend", "insert", "add", "put", "setdefault", "update"})
# Builtins that iterate what they are given.
_ITERATING = frozenset({"iter", "enumerate", "zip", "list", "tuple", "next", "map", "itertools.cycle", "cycle"})


def _bound(target: cst.BaseExpression) -> set[str]:
    """The names an assignment target binds (not `obj.attr` nor `obj[key]`, which change `obj`)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _bound(e.value)}
    if isinstance(target, cst.StarredElement):
        return _bound(target.value)
    return set()


def _assigned_in(loop: cst.CSTNode, name: str) -> Iterator[cst.BaseExpression]:
    """What `name` is assigned from inside `loop`, in its own function (not nested ones):
    `name = <expr>`, `name, other = <expr>`, `name: T = <expr>`."""
    stack: list[cst.CSTNode] = [loop]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Assign):
            if any(name in _bound(t.target) for t in node.targets):
                yield node.value
        elif isinstance(node, cst.AnnAssign) and node.value is not None \
                and isinstance(node.target, cst.Name) and node.target.value == name:
            yield node.value
        stack.extend(children(node))


def _set_before_rebuild(site: CallSite) -> bool:
    """`sampler.set_epoch(epoch)` and, further down the same pass of its loop, `sampler =
    build_sampler(...)` handed on to what makes the loader (`build_loader(ds, sampler=sampler)`):
    the epoch goes to the last pass's sampler, which is dropped, and the new one starts at epoch
    0 every pass. A rebinding under a test the `set_epoch` does not share may not happen."""
    receiver = site.receiver
    if not isinstance(receiver, cst.Name) or not site.loops:
        return False
    loop, name, scope = site.loops[-1], receiver.value, site.scope
    own = {id(g.node) for g in site.guards}
    for value, point in zip(scope.assignments.get(name, ()), scope.points.get(name, ())):
        if point is None or loop not in point.loops or point.tick <= site.tick or not isinstance(value, cst.Call):
            continue
        if point.loops[-1] is not loop or any(id(g.node) not in own for g in point.guards):
            continue
        if any(c.scope is scope and c.tick > point.tick and loop in c.loops
               and any(isinstance(a.value, cst.Name) and a.value.value == name for a in c.node.args)
               for c in site.module.calls):
            return True
    return False


def _constant_epoch(call: CallSite) -> bool:
    """`set_epoch(2)`: a number written in, the same whenever it runs."""
    epoch = argument(call.node, "epoch", 0)
    return epoch is not None and int_value(epoch) is not None


def _on_stop_iteration(call: CallSite) -> bool:
    """`call` sits in an `except StopIteration:` handler of its function."""
    for node in subexpressions(call.scope.node):
        if isinstance(node, cst.ExceptHandler) and node.type is not None \
                and (dotted(node.type) or "").rsplit(".", 1)[-1] == "StopIteration" \
                and any(n is call.node for n in subexpressions(node.body)):
            return True
    return False


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

    Reported at the epoch loop (where `set_epoch` goes; the sampler is a related location; at
    each, when the loaders of one construction — a table of loaders built in one comprehension —
    are iterated by the epoch loops of several functions, a pretraining and a fine-tuning stage) when
    a `DistributedSampler` (a project subclass, MONAI's, or a project sampler written like it
    whose order is drawn from the `self.epoch` its `set_epoch` sets) whose `shuffle` may be true (it defaults to
    `True`; a config value may turn it on) feeds a training `DataLoader` (as `sampler=` or inside
    `batch_sampler=`, also when a builder function of the project makes both) that is iterated
    inside a loop, or passed to a function inside a loop, and no `set_epoch(...)` is called on the
    sampler anywhere the script reaches: not through its variable, nor through `loader.sampler` /
    `loader.batch_sampler.sampler`, nor on any object the model cannot tell apart from it, nor by
    a function of the project that is handed the loader or the sampler. A project dataset's own
    `set_epoch` (`loader.dataset.set_epoch(epoch)`, for its crops or augmentation) is not the
    sampler's and does not count, unless that method passes the epoch on to another
    `set_epoch`. Validation and test
    samplers (by their names) are not reported: their order does not change a metric; nor is a
    loader read only without gradients (under `torch.no_grad()` / `inference_mode()`, a block
    or a decorator of the function that iterates it: a kNN monitor's feature bank), nor one read
    only by functions that never back-propagate in a run that does (a validation that embeds the
    training set for a linear probe fitted elsewhere), nor one whose
    epoch loop runs once (`range(epochs)` where `epochs` is the literal 1 on every path), nor one
    whose dataset is, on every path, a project class whose `__getitem__` never reads the index it
    is given (it draws each item from an on-line generator or at random): the order changes
    nothing.

    A project wrapper of the loader whose `__iter__` loops over what its constructor stored
    (`class WrappedDataLoader: def __init__(self, dl, func): self.dl = dl` ... `for b in
    self.dl: yield self.func(*b)`, also a class defined inside the function that builds the
    loader) is the loader where the loop iterates it; the sampler is then reached as
    `wrapper.dl.sampler`.

    A project helper handed the loader that starts it over each time it runs out (`def
    endless(iterable): it = iter(iterable); while True: ... except StopIteration: it =
    iter(iterable)`, or a `while True:` around `for batch in loader:`) restarts an epoch on
    each pass of its loop: without a `set_epoch`, each pass repeats the order. When the
    restart is a fresh `iter(...)` of the parameter, the finding is at the call that hands
    the loader over (`batches = endless(loader)`), since the helper cannot know the epoch. A
    loader started over in an `except StopIteration:` handler (`self.it = iter(self.loader)` in
    a `get_batch()` that step-based training calls) is reported at that restart: it is where
    each epoch begins, and where the `set_epoch` belongs.

    A loader wrapped in `itertools.cycle` (`batches = cycle(loader)`, then a step loop) is
    reported at the `cycle(...)` call: cycle keeps the first pass and replays it, so every pass
    after the first repeats its order.

    A `set_epoch` on a parameter of the function that runs the epochs does not count for a call
    of that function that hands it the loader together with another sampler (the data loaded
    again, `dataset, train_sampler = load_data(args)`, and `train(train_sampler=train_sampler,
    data_loader=data_loader)` with the loader built from the first sampler): there the loader's
    own sampler never gets its epoch, and the epoch loop is reported. Nor does a `set_epoch` on a
    name that the same pass of its loop then binds to a new sampler handed on to the loader's
    builder (`sampler.set_epoch(epoch)`, then `sampler = build_sampler(ds)` and
    `build_loader(ds, sampler)`): the epoch reaches the dropped sampler, and the new one starts at
    0 every pass. A project Dataset's `self.set_epoch(0)` in its own methods sets its own state.

    A `set_epoch(self.epoch)` whose attribute nothing in a loop ever writes (it is set in the
    constructor, or once on resume) passes the start epoch on every pass: it does not count, and
    is reported itself (also when an earlier `set_epoch(e)` in the same function is undone by it).
    So is a `set_epoch(args.epochs)` in `for epoch in range(args.epochs):`: the loop's bound,
    which the loop never changes, is the same on every pass; and a number written in
    (`loader.sampler.set_epoch(2)` in the epoch loop; a `set_epoch(0)` after a live one, before
    an evaluation, undoes nothing: the next pass sets the epoch again).
    A `set_epoch` that runs once, in the epoch loop's own function but outside any loop
    (`sampler.set_epoch(start_epoch)` before `for epoch in ...:`), sets the first epoch only:
    when no other `set_epoch` reaches the sampler, the epoch loop is reported.

    A loader rebuilt inside the loop gets a fresh sampler on each pass, which starts at epoch 0
    again: reported when it shuffles the same dataset with the same seed every pass (rebuilt each
    epoch from data made before the loop), not when what it is built from comes from the pass
    (`for stage in stages: loader = build_loader(stage)`, `DistributedSampler(ds, seed=epoch)`,
    also through a name assigned in the loop: `shard = load(files[i])`): each stage or task then
    has its own data, read once; but an epoch loop around that loop reads them all again in the
    same order, and is reported. So is an epoch loop around `for _, sampler, loader in
    make_loaders(files):`, a generator of the project that builds a loader per file in its own
    loop and yields it. The fix is not offered there, since
    the sampler does not exist yet at the top of the loop: call `set_epoch` after building it.

    ## How to fix
    Call `sampler.set_epoch(epoch)` as the first statement of the epoch loop, before iterating
    the loader. The fix inserts exactly that, right on every path: where the sampler exists
    only when distributed (`sampler = DistributedSampler(ds) if distributed else None`) it
    writes `if sampler is not None: sampler.set_epoch(epoch)`, and through the loader
    `if hasattr(loader.sampler, "set_epoch"): ...` (a plain sampler has no `set_epoch`); so it
    does too, through the loader the loop iterates, where the sampler or its loader is made in the
    distributed mode only (`if args.distributed: sampler = DistributedSampler(ds)` and an epoch
    loop shared by both modes). It is unsafe because it changes the order of samples from the
    second epoch on.

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    - https://github.com/pytorch/pytorch/issues/31771 (DistributedSampler can't shuffle the dataset)
    - https://github.com/pytorch/examples/issues/501
    """

    code = "DDP002"
    name = "set-epoch-not-called"
    severity = Severity.WARNING
    fixable = True
    ONCE = (
        "`set_epoch` is called on this DistributedSampler once, before the epoch loop: every epoch "
        "after the first reuses that order; call `{sampler}.set_epoch(epoch)` at the start of each epoch"
    )

    MESSAGE = (
        "DistributedSampler shuffles but `set_epoch` is never called on it: every epoch reuses the "
        "same order; call `{sampler}.set_epoch(epoch)` at the start of each epoch"
    )

    RESTART = (
        "DistributedSampler shuffles but `set_epoch` is never called on it, and `{helper}()` starts "
        "the loader over each time it runs out: every pass reuses the same order; iterate the "
        "loader in an epoch loop that calls `{sampler}.set_epoch(epoch)` before each pass"
    )

    ANOTHER = (
        "DistributedSampler shuffles but, where `{call}()` hands this loop a new sampler with the "
        "old loader, the `set_epoch` here reaches the new one: the loader still draws from its "
        "first sampler, which reuses one order every epoch; pass the loader's own sampler, or "
        "rebuild the loader from the new one"
    )

    CYCLED = (
        "DistributedSampler shuffles but `set_epoch` is never called on it, and `itertools.cycle()` "
        "replays the loader's first pass over and over: every pass reuses the same order; iterate "
        "the loader in an epoch loop that calls `{sampler}.set_epoch(epoch)` before each pass"
    )

    STALE = (
        "`set_epoch({epoch})` passes the same value on every epoch ({epoch} is never advanced in the "
        "loop): the sampler reuses one order; pass the epoch loop's counter"
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
        # A loader built anew for each stage's own data, iterated once per stage.
        from torch.utils.data import DataLoader, DistributedSampler
        for stage in stages:
            data = StageData(stage["root"])
            loader = DataLoader(data, sampler=DistributedSampler(data))
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
            # Rebuilt each epoch over the same data: a fresh sampler starts at epoch 0 every time.
            from torch.utils.data import DataLoader, DistributedSampler
            for epoch in range(10):
                loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
                for batch in loader:
                    step(batch)
            """,
            lines=(3,),
        ),
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
            lines=(7,),
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
            lines=(5,),
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
            lines=(5,),
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
            lines=(8,),
        ),
        Invalid(
            """
            # A sampler only when distributed: the fix must not call set_epoch on None.
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(train_set) if dist.is_initialized() else None
            loader = DataLoader(train_set, batch_size=64, shuffle=(sampler is None), sampler=sampler)
            for epoch in range(args.epochs):
                for batch in loader:
                    step(batch)
            """,
            lines=(6,),
            fixed="""
            # A sampler only when distributed: the fix must not call set_epoch on None.
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(train_set) if dist.is_initialized() else None
            loader = DataLoader(train_set, batch_size=64, shuffle=(sampler is None), sampler=sampler)
            for epoch in range(args.epochs):
                if sampler is not None:
                    sampler.set_epoch(epoch)
                for batch in loader:
                    step(batch)
            """,
        ),
        Invalid(
            """
            # Built inline by a helper: through the loader, whose sampler is a plain one when not
            # distributed (no set_epoch there).
            from torch.utils.data import DataLoader, DistributedSampler

            def make_loader(ds, distributed):
                return DataLoader(ds, batch_size=32, shuffle=not distributed,
                                  sampler=DistributedSampler(ds) if distributed else None)

            loader = make_loader(train_set, args.distributed)
            for epoch in range(10):
                for x, y in loader:
                    step(x, y)
            """,
            lines=(10,),
            fixed="""
            # Built inline by a helper: through the loader, whose sampler is a plain one when not
            # distributed (no set_epoch there).
            from torch.utils.data import DataLoader, DistributedSampler

            def make_loader(ds, distributed):
                return DataLoader(ds, batch_size=32, shuffle=not distributed,
                                  sampler=DistributedSampler(ds) if distributed else None)

            loader = make_loader(train_set, args.distributed)
            for epoch in range(10):
                if hasattr(loader.sampler, "set_epoch"):
                    loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    step(x, y)
            """,
        ),
        Invalid(
            """
            # One epoch loop for both modes; the sampler exists only when distributed.
            from torch.utils.data import DataLoader, DistributedSampler

            def train(args, dataset):
                if args.distributed:
                    sampler = DistributedSampler(dataset)
                    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
                else:
                    loader = DataLoader(dataset, batch_size=32, shuffle=True)
                for epoch in range(args.epochs):
                    for batch in loader:
                        step(batch)
            """,
            lines=(10,),
            fixed="""
            # One epoch loop for both modes; the sampler exists only when distributed.
            from torch.utils.data import DataLoader, DistributedSampler

            def train(args, dataset):
                if args.distributed:
                    sampler = DistributedSampler(dataset)
                    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
                else:
                    loader = DataLoader(dataset, batch_size=32, shuffle=True)
                for epoch in range(args.epochs):
                    if hasattr(loader.sampler, "set_epoch"):
                        loader.sampler.set_epoch(epoch)
                    for batch in loader:
                        step(batch)
            """,
        ),
    ]

    def finish(self) -> None:
        model = self.model
        self._backprop: bool | None = None
        self._wrapped: dict[int, str] = {}
        feeds: list[Feed] = []
        seen: set[int] = set()
        for site in model.paths.sites():
            if not model.makes(site, api.DATALOADER):
                continue
            found = feed(model, site) or self._project_feed(site)
            if found is None or id(found.sampler.node) in seen or not self._shuffles(found.sampler):
                continue
            if self._evaluation(found) or self._order_free(found):
                continue
            seen.add(id(found.sampler.node))
            feeds.append(found)
        if not feeds:
            return
        # A set_epoch that only some ranks call (in the rank-0 progress-bar branch) leaves the
        # others repeating their order: it does not count, unless the same rank guard keeps the
        # loader itself off those ranks (`if rank == 0: return` before both): every rank that
        # draws from the sampler sets its epoch.
        set_epochs = [s for s in model.paths.sites() if s.method == "set_epoch"]
        for found in feeds:
            setting = [s for s in set_epochs if self._every_drawing_rank(found, s) and self._may_set(found, s)
                       and not _set_before_rebuild(s)]
            if setting:
                # A set_epoch that runs once, in the epoch loop's own function outside any loop
                # (`sampler.set_epoch(start_epoch)` before `for epoch in ...:`), sets one epoch:
                # every later epoch replays that order.
                epoch_loop = self._epoch_loop(found)
                if epoch_loop is not None and isinstance(epoch_loop[0], (cst.For, cst.While)):
                    setting = [s for s in setting
                               if s.loops or s.module is not epoch_loop[1] or s.scope is not epoch_loop[2]]
                    if not setting:
                        self.report(epoch_loop[0], self.ONCE.format(sampler=self._expression(
                            found, epoch_loop[1], epoch_loop[2], epoch_loop[3])), module=epoch_loop[1])
                        continue
            # (A number written in, `set_epoch(2)`, is the same on every pass; but written after
            # a live one, `set_epoch(0)` before an evaluation, it undoes nothing the next pass
            # does not set again.)
            live = [s for s in setting if not self._stale(s) and not _constant_epoch(s)
                    and not any(self._overrides(later, s) for later in setting)]
            handed = self._handed_another(found, live) if live else None
            if live and handed is None:
                continue
            stale = [s for s in setting if self._stale(s) or _constant_epoch(s)]
            if stale:
                # `set_epoch(self.epoch)` with an epoch that never advances: the fix is its argument.
                for site in stale:
                    if self._epoch_loop(found) is not None:
                        self.report(site.node, self.STALE.format(epoch=site.module.code(site.node.args[0].value)),
                                    module=site.module)
                continue
            for loop in self._epoch_loops(found):
                self._report_loop(found, loop, handed)

    def _report_loop(self, found: Feed, loop: tuple[cst.CSTNode, ModuleModel, Scope, str, bool],
                     handed: CallSite | None) -> None:
        """The finding at one epoch loop of the feed (see `_epoch_loops`)."""
        model = self.model
        node, module, scope, loader, in_caller = loop
        expression = self._expression(found, module, scope, loader)
        fix = None
        made = found.sampler.module.call_at(found.sampler.call) if found.sampler.call is not None else None
        # A sampler made anew inside the loop does not exist yet at the loop's first line.
        rebuilt = made is not None and self._made_within(node, module, made, 4, set()) is not None
        if module is model.root and not rebuilt and not in_caller:
            given, _ = sampler_values(model, found.loader)
            conditional = any(isinstance(v.node, cst.CSTNode) and is_none(v.node) for v in given) \
                or any(model.api_of(v) in api.LOCAL_SAMPLERS for v in given)
            own_name = not expression.endswith(".sampler")
            guard = ("none" if own_name else "hasattr") if conditional else None
            target: str | None = expression
            if guard != "none" and remedies.made_on_some_paths([found.loader, *([made] if made else [])],
                                                               module, node, scope):
                # `if args.distributed: sampler = DistributedSampler(ds); loader = ...` and an
                # epoch loop for both modes: reach the sampler through the loader the loop
                # iterates, when it has one with `set_epoch`.
                target = remedies.through_loader(loader, scope, found.via_batch_sampler)
                guard = "hasattr"
            fix = remedies.set_epoch(node, target, guard) if target is not None else None
        # Reported at the epoch loop, where `set_epoch` goes; the sampler is a related location.
        message = self.MESSAGE.format(sampler=expression)
        if handed is not None:
            fix = None
            message = self.ANOTHER.format(call=handed.module.code(handed.node.func).strip())
        started = module.call_at(node) if isinstance(node, cst.Call) else None
        if started is not None and model.api(started) == "itertools.cycle":
            message = self.CYCLED.format(sampler=expression)
        elif isinstance(node, cst.Call):  # a helper that restarts the loader (see _restarts)
            message = self.RESTART.format(helper=module.code(node.func), sampler=expression)
        self.report(node, message, fix=fix, module=module,
                    related=([made] if made is not None else []) + ([handed] if handed is not None else []))

    def _order_free(self, found: Feed) -> bool:
        """The loader's dataset is, on every path, an instance of a project class whose
        `__getitem__` never reads the index it is given (it draws each item from an on-line
        generator or at random): the order the sampler hands out changes nothing."""
        model = self.model
        loader = found.loader
        dataset = loader.arg("dataset", 0)
        values = model.values.at_call(loader, dataset) if dataset is not None else []
        if not values:
            return False
        for value in values:
            instance = model.graph.instance_of(value)
            getitem = model.graph.method(*instance, "__getitem__") if instance is not None else None
            if getitem is None:
                return False
            params = getitem.params()
            node = getitem.module.functions.get(getitem.qualname)
            if len(params) != 2 or params[1].index != 1 or node is None:
                return False
            body = code_only(getitem.module.code(node.body))
            if re.search(rf"\b{re.escape(params[1].name)}\b", body) or re.search(r"\blocals\(|\bvars\(", body):
                return False
        return True

    def _project_feed(self, loader: CallSite) -> Feed | None:
        """A loader fed by a project sampler written like DistributedSampler (it splits by
        `num_replicas` into a `total_size`) whose order is drawn from the epoch `set_epoch`
        sets: it needs `set_epoch` as torch's does."""
        values, via_batch = sampler_values(self.model, loader)
        for value in values:
            site = value.module.call_at(value.call) if value.call is not None else None
            if site is None or not self.model.shards_like_distributed_sampler(site) \
                    or self.model.makes(site, api.DISTRIBUTED_SAMPLER):
                continue
            found = self.model.graph.class_at(site.target) if site.target is not None else None
            if found is None:
                continue
            chain = self.model.graph.mro(*found)
            iterate = next((m.functions[c.methods["__iter__"]] for m, c in chain if "__iter__" in c.methods), None)
            if any("set_epoch" in c.methods for _, c in chain) and iterate is not None \
                    and "self.epoch" in code_only(found[0].code(iterate)):
                return Feed(loader, value, via_batch)
        return None

    def _project_shuffle(self, sampler: Value) -> bool | None:
        """Whether a project sampler's own `shuffle` parameter may be true where it is made
        (None: the class has no such parameter)."""
        site = sampler.module.call_at(sampler.call) if sampler.call is not None else None
        found = self.model.graph.class_at(site.target) if site is not None and site.target is not None else None
        if site is None or found is None:
            return None
        init = self.model.graph.method(*found, "__init__")
        param = next((p for p in init.params() if p.name == "shuffle"), None) if init is not None else None
        if init is None or param is None:
            return None
        passed = self.model.graph.argument_for(site, init, param, "constructor")
        expr = passed if isinstance(passed, cst.BaseExpression) else param.default
        if expr is None:
            return True
        module, scope = (site.module, site.scope) if expr is passed else (init.module, init.scope)
        values = self.model.values.of(module, expr, scope)
        return not values or not all(is_false(v.node) for v in values)

    def _shuffles(self, sampler: Value) -> bool:
        """`shuffle` is left at its default (True), or may be true: a literal False (on every
        path) is the only way to turn the shuffle off for sure."""
        assert sampler.call is not None
        if not self.model.constructs(sampler, api.DISTRIBUTED_SAMPLER):
            own = self._project_shuffle(sampler)
            if own is not None:
                return own
        shared = api.shared_positions(self.model.api_of(sampler))
        shuffle = argument(sampler.call, "shuffle", 3 if shared is None or shared > 3 else None)
        if shuffle is None:
            return True
        values = self.model.values.of(sampler.module, shuffle, sampler.scope, sampler.frame, at=sampler.at)
        return not values or not all(is_false(v.node) for v in values)

    def _evaluation(self, found: Feed) -> bool:
        """A validation/test loader or sampler: its order does not change a metric."""
        loader, sampler = found.loader, found.sampler
        names = list(loader.module.assigned_names(loader.node))
        if sampler.call is not None:
            names += sampler.module.assigned_names(sampler.call)
            dataset = argument(sampler.call, "dataset", 0)
            if dataset is not None and dotted(dataset):
                names.append(dotted(dataset) or "")
        return any(is_eval_name(n) for n in names)

    def _every_drawing_rank(self, found: Feed, site: CallSite) -> bool:
        guard = self.model.paths.rank_guard(site)
        return guard is None or any(g.node is guard.node and g.negated == guard.negated
                                    for g in self.model.paths.guards_of(found.loader))

    def _may_set(self, found: Feed, site: CallSite) -> bool:
        """Whether `site` (a `set_epoch` call) may be on this sampler: its receiver may hold it,
        or holds something the model cannot see into. A receiver that certainly holds another
        sampler does not count."""
        receiver = site.receiver
        assert receiver is not None
        if self._own_on_self(site):
            return False  # `self.set_epoch(0)` in a project dataset's own method
        for value in self.model.values.at_call(site, receiver):
            if value.node is found.sampler.node:
                return True
            if is_none(value.node):
                continue  # `sampler = DistributedSampler(ds) if distributed else None`
            if self._dataset_own_set_epoch(value):
                continue  # `loader.dataset.set_epoch(epoch)`: the dataset's own, not the sampler's
            if value.call is None or not self.model.constructs(value, api.SAMPLER):
                return True  # unknown: it may be this one
        return False

    def _handed_another(self, found: Feed, setting: list[CallSite]) -> CallSite | None:
        """A call of the function whose `set_epoch` calls (`setting`, all on a parameter of that
        one function) would reach the sampler, that hands it this loader but a sampler certainly
        not this loader's (`train(train_sampler=new_sampler, data_loader=old_loader)` after a
        second `load_data()`): in that run the loader's sampler never gets its epoch."""
        values = self.model.values
        scopes = {id(s.scope) for s in setting}
        if len(scopes) != 1:
            return None
        for frame in values.frames(setting[0]):
            if frame is None:
                return None
            call = frame.call
            if not any(v.node is found.loader.node for a in call.node.args
                       for v in values.at_call(call, a.value)):
                continue
            if not all(self._certainly_other(found, s, frame) for s in setting):
                continue
            return call
        return None

    def _certainly_other(self, found: Feed, site: CallSite, frame: Frame) -> bool:
        """In `frame`, the receiver of `set_epoch` call `site` holds only samplers that are not
        the one that feeds the loader (another construction, or the same one made by another
        call of the function that builds it)."""
        receiver = site.receiver
        if receiver is None:
            return False
        seen = False
        for value in self.model.values.at_call(site, receiver, frame):
            if is_none(value.node):
                continue
            if value.call is None or not self.model.constructs(value, api.SAMPLER):
                return False
            if value.node is found.sampler.node and Values.same_object(value, found.sampler):
                return False
            seen = True
        return seen

    def _own_on_self(self, site: CallSite) -> bool:
        """`self.set_epoch(0)` in a method of a project class that is a Dataset and no sampler
        (`__init__` of a video dataset drawing its first epoch's clips), whose own `set_epoch`
        passes the epoch to no other `set_epoch`: the dataset's own state, not a sampler's."""
        receiver, class_scope = site.receiver, site.scope.class_scope
        if not (isinstance(receiver, cst.Name) and receiver.value == "self") or class_scope is None:
            return False
        info = next((c for c in site.module.classes.values() if c.scope is class_scope), None)
        graph = self.model.graph
        path = resolved_path(site.module.path) if info is not None else None
        target = Target(None, path, info.qualname, "class") if info is not None and path is not None else None
        if info is None or target is None or graph.is_subclass(target, api.SAMPLER) \
                or not graph.is_subclass(target, api.DATASET):
            return False
        method = graph.method(site.module, info, "set_epoch")
        return method is not None and ".set_epoch(" not in code_only(method.module.code(method.node))

    def _dataset_own_set_epoch(self, value: Value) -> bool:
        """A project Dataset (not a sampler) whose own `set_epoch` sets only its own state: it
        does not pass the epoch on to a sampler (its method calls no other `set_epoch`)."""
        if not self.model.constructs(value, api.DATASET) or self.model.constructs(value, api.SAMPLER):
            return False
        site = value.module.call_at(value.call) if value.call is not None else None
        found = self.model.graph.class_at(site.target) if site is not None and site.target is not None else None
        if found is None:
            return False
        method = self.model.graph.method(*found, "set_epoch")
        return method is not None and ".set_epoch(" not in code_only(method.module.code(method.node))

    def _stale(self, site: CallSite) -> bool:
        """`set_epoch(self.epoch)` where nothing that runs in a loop ever writes `.epoch` (it is
        set in a constructor, or once on resume): the start epoch on every pass, so the order
        never changes."""
        epoch = argument(site.node, "epoch", 0)
        if self._loop_bound(site, epoch):
            return True
        if not isinstance(epoch, cst.Attribute) or dotted(epoch.value) != "self" or site.scope.class_scope is None:
            return False
        attr = re.escape(epoch.attr.value)
        # (a loop that binds the attribute itself, `for self.epoch in range(...)`, advances it too)
        writes = re.compile(rf"\.{attr}\s*(\+|-)?=(?!=)|setattr\("
                            rf"|\bfor\s+(?:(?!\bin\b)[\w\s,.()\[\]])*?\.{attr}\b(?:(?!\bin\b)[\w\s,.()\[\]])*\bin\b")
        found = False
        for module in self.model.paths.modules():
            text = code_only(module.code(module.tree))
            if not writes.search(text):
                continue
            inside = 0
            for qualname, node in module.functions.items():
                count = len(writes.findall(code_only(module.code(node))))
                if not count:
                    continue
                if "." in qualname and qualname.rsplit(".", 2)[-2] in module.functions:
                    continue  # a nested function: counted with the one it is in
                inside += count
                found = True
                if self._written_in_loop(Function(module, qualname), node, writes, 2):
                    return False
            if inside < len(writes.findall(text)):
                return False  # a write outside any function
        return found

    @staticmethod
    def _loop_bound(site: CallSite, epoch: cst.BaseExpression | None) -> bool:
        """`set_epoch(args.epochs)` inside `for epoch in range(args.epochs):`: the argument is
        part of what the loop iterates over (its bound, read once) and the loop neither binds
        nor writes it, so every pass passes the same value."""
        text = dotted(epoch)
        if text is None:
            return False
        root = text.split(".")[0]
        for loop in site.loops:
            if not isinstance(loop, cst.For) or not any(dotted(sub) == text for sub in subexpressions(loop.iter)):
                continue
            if any(isinstance(sub, cst.Name) and sub.value == root for sub in subexpressions(loop.target)):
                return False
            name = re.escape(text)
            writes = re.compile(rf"(?<![\w.]){name}\s*(\+|-|\*)?=(?!=)|(?<![\w.]){re.escape(root)}\s*=(?!=)"
                                rf"|\bfor\b[^\n]*(?<![\w.]){re.escape(root)}\b[^\n]*\bin\b|setattr\(|\bglobal\b|\bnonlocal\b")
            return not writes.search(code_only(site.module.code(loop.body)))
        return False

    def _written_in_loop(self, function: Function, node: cst.FunctionDef, writes: re.Pattern[str],
                         depth: int) -> bool:
        """A write in a loop of `function`, or `function` called (up to `depth` callers away)
        from inside a loop."""
        stack: list[cst.CSTNode] = [node.body]
        while stack:
            current = stack.pop()
            if isinstance(current, (cst.For, cst.While)) and writes.search(code_only(function.module.code(current))):
                return True
            stack.extend(children(current))
        for caller, _ in self.model.graph.callers(function):
            if caller.loops:
                return True
            outer = self.model.paths.function_of(caller)
            if depth > 0 and outer is not None and self._written_in_loop(outer, outer.node, writes, depth - 1):
                return True
        return False

    def _overrides(self, later: CallSite, site: CallSite) -> bool:
        """`later`, a stale `set_epoch` of the same function after `site`, undoes what it set."""
        return later is not site and later.scope is site.scope and later.tick > site.tick and self._stale(later)

    def _holds_loader(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope, loader: cst.Call,
                      at: Point) -> bool:
        found = False
        for value in self.model.values.of(module, expr, scope, at=at):
            if value.node is loader:
                found = True
                continue
            # A project wrapper whose `__iter__` iterates the loader (`WrappedDataLoader(loader,
            # preprocess)`): iterating it iterates the loader, reached as `wrapper.dl`.
            for attribute, inner in wrapped_iterables(self.model, value):
                if inner.node is loader:
                    self._wrapped[id(expr)] = attribute
                    found = True
        return found

    def _loader_name(self, expr: cst.BaseExpression) -> str:
        """How the loop's code names the loader: through a wrapper's attribute where it holds one."""
        name = dotted(expr) or "loader"
        attribute = self._wrapped.get(id(expr))
        return f"{name}.{attribute}" if attribute is not None and name != "loader" else name

    def _iterated(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope, loader: cst.Call,
                  at: Point) -> cst.BaseExpression | None:
        """The expression that is the loader in `for ... in <expr>`: `loader`, `enumerate(loader)`,
        `tqdm(loader, ...)`, `zip(loader, other)`, `logger.log_every(loader, 10)`."""
        if self._holds_loader(module, expr, scope, loader, at):
            return expr
        if isinstance(expr, cst.Call):
            for a in expr.args:
                found = self._iterated(module, a.value, scope, loader, at)
                if found is not None:
                    return found
        return None

    def _epoch_loop(self, found: Feed) -> tuple[cst.CSTNode, ModuleModel, Scope, str, bool] | None:
        """The loop around an iteration of the loader (or around a call handed the loader),
        with its module and scope and how the loader is named there: the first such loop that
        repeats one order (see _repeats); last, whether that loop is a caller's (the loader is
        named in the callee, so no fix is offered)."""
        loops = self._epoch_loops(found, every=False)
        return loops[0] if loops else None

    def _epoch_loops(self, found: Feed, every: bool = True) -> list[tuple[cst.CSTNode, ModuleModel, Scope, str, bool]]:
        """`_epoch_loop`, and with `every` also the epoch loops of other functions that iterate
        the same loader in a loop of their own or hand it to a call inside one (a pretraining
        and a fine-tuning stage reading one loader of a table each: each needs its
        `set_epoch`), in the order the run's modules list them."""
        out: list[tuple[cst.CSTNode, ModuleModel, Scope, str, bool]] = []

        def add(found_loop: tuple[cst.CSTNode, ModuleModel, Scope, str, bool], own: bool = False) -> bool:
            """Keep one loop per function; True when the search may stop. Past the first, only
            `own` loops count: a function's epoch loop around its own iteration of the loader
            (a call handed the loader, a restarting helper, is where the first one's loader
            goes, not another stage)."""
            if not out or own and all(o[2] is not found_loop[2] for o in out):
                out.append(found_loop)
            return not every

        loader = found.loader.node
        paths = self.model.paths
        later: list[tuple[ModuleModel, Scope, str, int]] = []  # iterated where no loop is: callers'
        measuring: set[int] = set()  # the calls in the heads of loops that only measure
        for module in paths.modules():
            for site in module.fors:
                used = self._iterated(module, site.node.iter, site.scope, loader, site.point)
                if used is not None and not self._trains(module, site.scope):
                    measuring |= {id(n) for n in subexpressions(site.node.iter) if isinstance(n, cst.Call)}
                    continue
                if used is None or self._without_grad(module, site.withs, site.scope):
                    continue
                if site.loops:
                    # The innermost loop that repeats one order: a per-file loop that rebuilds
                    # the loader from each file does not, the epoch loop around it does.
                    for loop in reversed(site.loops):
                        if self._repeats(found, loop, module, site.scope):
                            if add((loop, module, site.scope, self._loader_name(used), False), own=True):
                                return out
                            break
                    continue
                # `def train_epoch(self): for x in self.loader` run from an epoch loop (tried
                # last: a loop that hands the loader to the function names it itself).
                later.append((module, site.scope, self._loader_name(used), -1))
        for call in paths.sites():
            if not self._iterates(call) or self._without_grad(call.module, call.withs, call.scope) \
                    or self._evaluates(call) or id(call.node) in measuring:
                continue
            point = None
            for a in call.node.args:
                point = point or call.point  # made anew at each read
                if not self._holds_loader(call.module, a.value, call.scope, loader, point):
                    continue
                if call.loops:
                    if self._repeats(found, call.loops[0], call.module, call.scope):
                        # `iter(loader)` deep in a step loop, `train_one_epoch(loader)`: the
                        # outermost loop of the function is the epoch loop.
                        if add((call.loops[0], call.module, call.scope, self._loader_name(a.value), False)):
                            return out
                    continue
                if self.model.api(call) == "itertools.cycle":
                    # `itertools.cycle(loader)` keeps what the first pass yields and replays it:
                    # however long the run, every pass is the first epoch's order.
                    if add((call.node, call.module, call.scope, self._loader_name(a.value), True)):
                        return out
                    continue
                restart = self._restarts(call, a.value)
                if restart is not None and self._repeats(found, *restart):
                    # `batches = infinite(loader)`, whose `while True:` starts the loader over
                    # each time it runs out: every restart is an epoch, and none can set it.
                    if add((call.node, call.module, call.scope, self._loader_name(a.value), True)):
                        return out
                    continue
                # `self.it = iter(self.loader)` when the data runs out, in a `get_batch()` the
                # step loop calls: each restart is a new epoch. Restarted in an `except
                # StopIteration:` handler, the restart itself is the epoch's start.
                if _on_stop_iteration(call):
                    if add((call.node, call.module, call.scope, self._loader_name(a.value), True)):
                        return out
                    continue
                later.append((call.module, call.scope, self._loader_name(a.value), 0))
        if out:
            return out
        for module, scope, name, which in later:
            outer = self._looping_caller(module, scope)
            if outer is not None and self._repeats(found, outer.loops[which], outer.module, outer.scope):
                return [(outer.loops[which], outer.module, outer.scope, name, True)]
        return []

    def _restarts(self, call: CallSite, arg: cst.BaseExpression) -> tuple[cst.CSTNode, ModuleModel, Scope] | None:
        """The loop of a project function that iterates what `call` passes it as `arg` anew on
        each pass (`def cycle(iterable): while True: for x in iterable: yield x`, or `it =
        iter(iterable)` again on `StopIteration`): with that loop's module and scope."""
        for callee, bound in self.model.graph.targets(call):
            module = callee.module
            params = [p for p in callee.params() if self.model.graph.argument_for(call, callee, p, bound) is arg]
            if len(params) != 1 or "." in params[0].name:
                continue
            name = params[0].name
            for site in module.fors:
                if site.scope is callee.scope and site.loops and isinstance(site.node.iter, cst.Name) \
                        and site.node.iter.value == name:
                    return site.loops[-1], module, callee.scope
            for inner in module.calls_in(callee.qualname):
                if not inner.loops:
                    continue
                start: cst.BaseExpression | None = None
                if inner.dotted == "iter" and inner.node.args:
                    start = inner.node.args[0].value
                elif inner.method == "__iter__":
                    start = inner.receiver
                if isinstance(start, cst.Name) and start.value == name:
                    return inner.loops[-1], module, callee.scope
        return None

    def _without_grad(self, module: ModuleModel, withs: tuple[cst.With, ...], scope: Scope) -> bool:
        """Code that runs under `torch.no_grad()` / `inference_mode()`: it evaluates, and the
        order of what it reads does not change training (a kNN monitor's feature bank)."""
        function = scope.function
        return is_no_grad(self.model, module, withs, function.qualname if function is not None else None)

    def _evaluates(self, call: CallSite) -> bool:
        """A call of project functions that all run without gradients (`@torch.no_grad()`), or
        that never back-propagate (`valid(train_loader, ...)` building a kNN feature bank): the
        order they read the loader in changes nothing."""
        targets = self.model.graph.targets(call)
        if not targets:
            return False
        if all(is_no_grad(self.model, function.module, (), function.qualname) for function, _ in targets):
            return True
        # (A generator hands the batches on to a caller that may train on them.)
        return not self.model.facts.does(call, "backward") \
            and not any(function.qualname in function.module.generators for function, _ in targets) \
            and self._run_back_propagates()

    def _trains(self, module: ModuleModel, scope: Scope) -> bool:
        """A loop over the loader in a function that back-propagates (itself or through what it
        calls), where the run back-propagates somewhere; a module-level loop is taken to."""
        if scope.kind != "function" or scope.qualname in module.generators:
            return True  # (a generator hands the batches on)
        trains = training_scopes(self.model, module)
        return id(scope) in trains or not self._run_back_propagates()

    def _run_back_propagates(self) -> bool:
        if self._backprop is None:
            self._backprop = any(c.method == "backward" for c in self.model.paths.sites())
        return self._backprop

    def _looping_caller(self, module: ModuleModel, scope: Scope) -> CallSite | None:
        function = scope.function
        if function is None:
            return None
        return self.model.paths.looping_call(Function(module, function.qualname))

    def _repeats(self, found: Feed, loop: cst.CSTNode, module: ModuleModel, scope: Scope) -> bool:
        """Whether each pass of `loop` draws the sampler's order again unchanged. A sampler made
        before the loop keeps epoch 0 on every pass. A sampler made anew on each pass (the loader
        rebuilt per stage, task or epoch) also starts at epoch 0: its order is the same again
        when it shuffles the same dataset with the same seed, and differs when what it is built
        from comes from the pass (`for stage in stages: build_loader(stage)`, `seed=epoch`)."""
        if self._runs_once(loop, module, scope):
            return False
        sampler = found.sampler
        made = sampler.module.call_at(sampler.call) if sampler.call is not None else None
        if made is None:
            return True
        drawn = self._drawn_from_generator(loop, module, made)
        if drawn is not None:
            # `for _, loader in make_loaders(files):` where the generator makes the sampler in
            # its own loop: each pass of this loop is a pass of that one, which decides.
            return self._repeats(found, drawn, made.module, made.scope)
        top = self._made_within(loop, module, made, 4, set())
        if top is None:
            return True  # made once, before the loop
        names = self._loop_names(loop)
        if not names:
            return True  # `while`: nothing of the pass tells the samplers apart
        return not any(self._from_pass(module, a.value, scope, top, names, 2, loop) for a in top.node.args)

    def _drawn_from_generator(self, loop: cst.CSTNode, module: ModuleModel, made: CallSite) -> cst.CSTNode | None:
        """The loop of a project generator that makes the sampler (`made`) on each of its passes,
        when `loop` iterates a call of that generator (its iterable is evaluated once, before
        the passes: the sampler is not made by this loop's own code)."""
        if not isinstance(loop, cst.For) or not made.loops:
            return None
        function = self.model.paths.function_of(made)
        if function is None or function.qualname not in made.module.generators:
            return None
        for caller, _ in self.model.graph.callers(function):
            if caller.module is module and any(n is caller.node for n in subexpressions(loop.iter)):
                return made.loops[-1]
        return None

    def _runs_once(self, loop: cst.CSTNode, module: ModuleModel, scope: Scope) -> bool:
        """`for epoch in range(epochs)` where `epochs` is 1 (or 0) on every path the model sees
        (`trainer.train(total_epochs)` with `total_epochs = 1`): there is no second epoch."""
        if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call) or dotted(loop.iter.func) != "range":
            return False
        args = loop.iter.args
        if not 1 <= len(args) <= 2 or any(a.keyword is not None or a.star for a in args):
            return False
        bounds = [self._integers(module, a.value, scope) for a in args]
        if any(not b for b in bounds):
            return False
        if len(bounds) == 1:
            return max(bounds[0]) <= 1
        return max(bounds[1]) - min(bounds[0]) <= 1

    def _integers(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope) -> list[int]:
        """Every integer `expr` may hold, or [] when one of its values is not a literal integer."""
        out: list[int] = []
        for value in self.model.values.of(module, expr, scope):
            node = value.node
            if not isinstance(node, cst.Integer):
                return []
            out.append(int(node.evaluated_value))
        return out

    def _made_within(self, loop: cst.CSTNode, module: ModuleModel, site: CallSite, depth: int,
                     seen: set[int]) -> CallSite | None:
        """The call inside `loop` (in `module`) that makes or leads to `site`, if any."""
        if site.module is module and loop in site.loops:
            return site
        function = self.model.paths.function_of(site)
        if depth <= 0 or function is None or id(site.node) in seen:
            return None
        seen.add(id(site.node))
        for caller, _ in self.model.graph.callers(function):
            found = self._made_within(loop, module, caller, depth - 1, seen)
            if found is not None:
                return found
        return None

    @staticmethod
    def _loop_names(loop: cst.CSTNode) -> frozenset[str]:
        if not isinstance(loop, cst.For):
            return frozenset()
        return frozenset(n.value for n in subexpressions(loop.target) if isinstance(n, cst.Name))

    def _from_pass(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope, at: CallSite,
                   names: frozenset[str], depth: int, loop: cst.CSTNode) -> bool:
        """`expr` (an argument of a call in the loop) depends on the loop's variables: it names
        one, or a value assigned from one in the loop (`data = load(files[i])`, whose value the
        model may only know as what `load` returns)."""
        used = [n for n in subexpressions(expr) if isinstance(n, cst.Name)]
        if any(n.value in names for n in used):
            return True
        if depth <= 0:
            return False
        for name in used:
            if not scope.lookup(name.value):
                continue
            if any(self._from_pass(module, source, scope, at, names, depth - 1, loop)
                   for source in _assigned_in(loop, name.value)):
                return True
            for value in self.model.values.of(module, name, scope, at=at.point):
                node = value.node
                if value.module is module and isinstance(node, cst.CSTNode) and not isinstance(node, cst.Name) \
                        and self._from_pass(module, node, scope, at, names, depth - 1, loop):
                    return True
        return False

    def _iterates(self, call: CallSite) -> bool:
        """A call that may iterate a loader handed to it: a function (of the project or unknown),
        `iter`, `enumerate`, `zip`, a progress bar; not `len`, `print` or a list's `append`."""
        if call.dotted in _ITERATING or self.model.api(call) in api.TQDM:
            return True
        if call.dotted in _NOT_ITERATING or call.method in _STORES:
            return False
        name = self.model.api(call)
        return name is None or name not in api.KNOWN

    def _expression(self, found: Feed, module: ModuleModel, scope: Scope, loader: str) -> str:
        """How code in the epoch loop's scope reaches the sampler: its own name where that is
        visible there, else through the loader."""
        sampler = found.sampler
        if sampler.module is module and sampler.call is not None:
            for name in remedies.names_holding(sampler.module, sampler.call):
                if scope.lookup(name) or scope.lookup(name.split(".", 1)[0]):
                    return name
        return f"{loader}.batch_sampler.sampler" if found.via_batch_sampler else f"{loader}.sampler"
