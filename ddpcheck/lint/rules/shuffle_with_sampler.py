from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint import remedies
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import distributed_sampler
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import argument, dotted, is_false, is_none, is_true
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule


class ShuffleWithSampler(Rule):
    """`DataLoader(shuffle=True, sampler=...)`: PyTorch raises ValueError when the loader is built.

    ## Why it matters
    A `DataLoader` either shuffles itself (`shuffle=True`, through a `RandomSampler`) or takes the
    order from the sampler you give it; it refuses both. Users see, on every rank, at start-up:
    `ValueError: sampler option is mutually exclusive with shuffle` (or, with `batch_sampler=`,
    `batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last`).
    It often hides behind a flag: the single-GPU path passes `sampler=None` and works, and only the
    distributed run crashes.

    Reported when `shuffle` is `True` (passed directly, through a variable or a parameter's
    default, or through `**kwargs` built as a dict, merged with `{**a, **b}` or `dict(a, **b)`,
    `kwargs.update(...)` or `kwargs["shuffle"] = True` outside any condition the loader is not
    under) and, on the same path, the `sampler=`/`batch_sampler=` argument is a sampler the code
    builds (a torch sampler or a project subclass of `Sampler`, followed through assignments,
    builders and both arms of `x if cond else None`). A path is one call of the function that
    builds the loader (`build(ds, sampler=s, shuffle=False)` and `build(ds)` are two loaders,
    neither wrong), and values set in opposite arms of one `if` (`sampler = DistributedSampler(ds);
    shuffle = False` / `else: sampler = None; shuffle = True`), or of one name-only test written
    twice (`... if n_gpus > 1 else None` and `shuffle=False if n_gpus > 1 else True`; the arm of
    `if ddp and split != "test":` holds `ddp` too), never meet. `shuffle=True if sampler is None else False` with that same sampler passed is True
    only where there is no sampler: not reported (and where every binding of `sampler` builds
    one, the True arm is not a value at all). `shuffle=(sampler is None)` and other computed
    values (`shuffle=is_train and sampler is None`) are not reported.

    ## How to fix
    Drop `shuffle=True`: a `DistributedSampler` shuffles by itself (its `shuffle` defaults to
    `True`; call `set_epoch(epoch)` each epoch). With a flag, pass `shuffle=(sampler is None)`.
    The fix is right on every path: where the sampler exists only on some paths (`sampler =
    DistributedSampler(ds) if distributed else None`) it writes `shuffle=(sampler is None)` (or
    `shuffle=not distributed` for an inline `... if distributed else None`), so the
    single-process run keeps shuffling — safe. Where the sampler is always there it removes
    `shuffle=True`: safe for a DistributedSampler that shuffles (the order stays shuffled, as
    asked), unsafe for other samplers (the order becomes theirs).

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader
    - https://github.com/ultralytics/yolov3/issues/231 (the flag-dependent form of this crash)
    """

    code = "DDP006"
    name = "shuffle-with-sampler"
    severity = Severity.ERROR
    fixable = True
    MESSAGE = (
        "`shuffle=True` together with `{arg}=`: DataLoader raises ValueError (mutually exclusive); "
        "drop `shuffle=True`, the sampler decides the order (DistributedSampler shuffles by default)"
    )

    VALID = [
        """
        # Sampler and shuffle chosen together on each path; each call of the helper passes the
        # shuffle that goes with its sampler.
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        def make_loader(ds, sampler=None, shuffle=True):
            return DataLoader(ds, batch_size=32, shuffle=shuffle, sampler=sampler)
        if torch.cuda.device_count() > 1:
            sampler = DistributedSampler(train_set)
            shuffle = False
        else:
            sampler = None
            shuffle = True
        loader = DataLoader(train_set, batch_size=32, shuffle=shuffle, sampler=sampler)
        train_loader = make_loader(train_set, sampler=DistributedSampler(train_set), shuffle=False)
        val_loader = make_loader(val_set)
        """,
        """
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        """,
        """
        # A flag picks one or the other.
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(dataset) if args.distributed else None
        loader = DataLoader(dataset, shuffle=(sampler is None), sampler=sampler)
        single = DataLoader(dataset, shuffle=True, sampler=None)
        """,
        """
        # shuffle=False with a sampler is allowed.
        import torch
        loader = torch.utils.data.DataLoader(
            dataset, shuffle=False, sampler=torch.utils.data.distributed.DistributedSampler(dataset))
        """,
        """
        # Not a torch DataLoader.
        from mylib import DataLoader
        loader = DataLoader(dataset, shuffle=True, sampler=MySampler(dataset))
        """,
    ]
    INVALID = [
        Invalid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
            """,
            lines=(3,),
            fixed="""
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            """,
        ),
        Invalid(
            """
            # Behind a flag, aliased, last argument: the distributed run crashes.
            import torch.utils.data as tud
            sampler = tud.DistributedSampler(ds) if distributed else None
            loader = tud.DataLoader(ds, sampler=sampler, shuffle=True)
            """,
            lines=(4,),
            fixed="""
            # Behind a flag, aliased, last argument: the distributed run crashes.
            import torch.utils.data as tud
            sampler = tud.DistributedSampler(ds) if distributed else None
            loader = tud.DataLoader(ds, sampler=sampler, shuffle=(sampler is None))
            """,
        ),
        Invalid(
            """
            # The sampler chosen inline: shuffle exactly when it is absent.
            from torch.utils.data import DataLoader, DistributedSampler
            train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                                      sampler=DistributedSampler(train_set) if args.distributed else None)
            """,
            lines=(3,),
            fixed="""
            # The sampler chosen inline: shuffle exactly when it is absent.
            from torch.utils.data import DataLoader, DistributedSampler
            train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=not args.distributed,
                                      sampler=DistributedSampler(train_set) if args.distributed else None)
            """,
        ),
        Invalid(
            """
            # A multi-line call keeps its layout and comments.
            from torch.utils.data import DataLoader, DistributedSampler
            loader = DataLoader(dataset, batch_size=128, shuffle=True,  # per GPU
                                sampler=DistributedSampler(dataset), num_workers=8)
            """,
            lines=(3,),
            fixed="""
            # A multi-line call keeps its layout and comments.
            from torch.utils.data import DataLoader, DistributedSampler
            loader = DataLoader(dataset, batch_size=128,  # per GPU
                                sampler=DistributedSampler(dataset), num_workers=8)
            """,
        ),
        Invalid(
            """
            from torch.utils.data import BatchSampler, DataLoader, DistributedSampler
            bs = BatchSampler(DistributedSampler(ds), batch_size=8, drop_last=False)
            loader = DataLoader(ds, batch_sampler=bs, shuffle=True)
            """,
            lines=(3,),
        ),
        Invalid(
            """
            # A helper's default shuffle=True meets the sampler one caller passes; options merged
            # from dicts (`update`, `{**a, **b}`) carry shuffle=True in.
            from torch.utils.data import DataLoader, DistributedSampler
            def make_loader(ds, sampler=None, shuffle=True):
                return DataLoader(ds, batch_size=32, shuffle=shuffle, sampler=sampler)
            train_loader = make_loader(train_set, sampler=DistributedSampler(train_set))
            base = {"batch_size": 64}
            cuda = {"num_workers": 2, "pin_memory": True, "shuffle": True}
            base.update(cuda)
            aux_loader = DataLoader(aux_set, sampler=DistributedSampler(aux_set), **base)
            more_loader = DataLoader(aux_set, sampler=DistributedSampler(aux_set), **{**base, **cuda})
            """,
            lines=(5, 10, 11),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        for site in model.paths.sites():
            if not model.makes(site, api.DATALOADER):
                continue
            shuffle = site.arg("shuffle", 2)
            if shuffle is not None and is_false(shuffle):
                continue
            found = self._on_one_path(site)
            if found is None:
                continue
            keyword, values, through = found
            where = shuffle if shuffle is not None else site.node
            fix = None
            if shuffle is not None and is_true(shuffle):
                position = 3 if keyword == "sampler" else 4
                sampler = site.arg(keyword, position)
                built = distributed_sampler(model, values, keyword == "batch_sampler")
                shuffles = built is not None and built.call is not None and not is_false(
                    argument(built.call, "shuffle", 3))
                fix = remedies.shuffle_with_sampler(site.node, shuffle, sampler, values, shuffles)
            related = model.paths.chain(site) + ([through] if through is not None else [])
            self.report(where, self.MESSAGE.format(arg=keyword), fix=fix, module=site.module, related=related)

    def _on_one_path(self, site: CallSite) -> tuple[str, list[Value], CallSite | None] | None:
        """The sampler argument (and its values) that is a sampler the code builds where
        `shuffle` is True on the same path: one call of the loader's function at a time
        (`build(ds, sampler=s, shuffle=False)` and `build(ds)` are two loaders), and not from
        opposite arms of one `if` (`sampler = DistributedSampler(ds); shuffle = False` /
        `else: sampler = None; shuffle = True`). With the call of the function that makes that
        path, when there is one."""
        model = self.model
        for frame in model.values.frames(site):
            for keyword, position in (("sampler", 3), ("batch_sampler", 4)):
                values = model.values.keyword(site, keyword, position, frame)
                for built in values:
                    if not model.constructs(built, api.SAMPLER):
                        continue
                    # What shuffle is where this sampler is made (a `shuffle = False` beside it
                    # hides an earlier `shuffle = True`).
                    at = model.values.along(site, built)
                    given = site.arg(keyword, position)
                    if any(is_true(v.node) and model.values.compatible(built, v)
                           and not any(isinstance(g.node, cst.BooleanOperation) for g in v.arms)
                           and not _only_without(v, given)
                           for v in model.values.keyword(site, "shuffle", 2, frame, at)):
                        return keyword, values, frame.call if frame is not None else None
        return None


def _only_without(value: Value, sampler: cst.BaseExpression | None) -> bool:
    """`shuffle=True if sampler is None else False` with that same `sampler` passed: the True arm
    is chosen only where there is no sampler."""
    name = dotted(sampler) if sampler is not None else None
    if name is None:
        return False
    for guard in value.arms:
        test = guard.test
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        comp = test.comparisons[0]
        sides = (test.left, comp.comparator)
        if not any(is_none(side) for side in sides) or name not in (dotted(side) for side in sides):
            continue
        if isinstance(comp.operator, cst.Is) and not guard.negated \
                or isinstance(comp.operator, cst.IsNot) and guard.negated:
            return True
    return False

