from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.conditions import on_main_rank_only, on_single_process_only
from ddpcheck.lint.context import DATALOADER, DISTRIBUTED_SAMPLER, CallSite
from ddpcheck.lint.names import dotted, last_name
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.values import is_none, origins

_EVAL_WORDS = ("val", "valid", "test", "eval")


class MissingDistributedSampler(Rule):
    """A DataLoader in a DDP script has no DistributedSampler, so every rank reads the whole dataset.

    ## Why it matters
    Without a `DistributedSampler` (or a `batch_sampler` that shards), each of the N ranks iterates
    over the full dataset. The job does N times the work per epoch for the same result: an epoch
    takes as long as on one GPU and each sample is seen N times per epoch, which also changes the
    effective batch statistics. Nothing crashes; training is just slower and subtly different.

    Not reported: loaders built only on rank 0 (e.g. for evaluation on the main process) or only
    in the non-distributed branch of a script (`if not args.distributed:`), loaders
    over an `IterableDataset` (they must shard themselves; `ddpcheck run` checks that at run time),
    loaders given any `sampler=`/`batch_sampler=` that is not plainly a non-distributed sampler, and
    evaluation loaders (named `val*`, `test*`, `eval*`): evaluating the full set on every rank costs
    time but is not wrong.

    ## How to fix
    Build a `DistributedSampler(dataset)` and pass it as `sampler=`; drop `shuffle=True` from the
    loader (the sampler shuffles) and call `sampler.set_epoch(epoch)` at the start of each epoch.

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP001"
    name = "missing-distributed-sampler"
    severity = Severity.WARNING
    MESSAGE = (
        "DataLoader has no DistributedSampler: every rank reads the whole dataset; pass "
        "`sampler=DistributedSampler(dataset)` and drop `shuffle=True`"
    )

    VALID = [
        """
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        """,
        """
        # Aliased and fully dotted names resolve the same.
        import torch
        from torch.utils.data.distributed import DistributedSampler as DS
        torch.distributed.init_process_group("gloo")
        loader = torch.utils.data.DataLoader(dataset, sampler=DS(dataset))
        """,
        """
        # Rank-0-only evaluation loader.
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            loader = DataLoader(dataset, batch_size=64)
        """,
        """
        # Not a DDP script at all.
        from torch.utils.data import DataLoader
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        """,
        """
        # An IterableDataset shards itself.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, IterableDataset
        class Stream(IterableDataset):
            def __iter__(self):
                yield from range(dist.get_rank(), 100, dist.get_world_size())
        dist.init_process_group("gloo")
        loader = DataLoader(Stream(), batch_size=8)
        """,
        """
        # The sampler comes from a helper or is chosen by a flag: not plainly wrong.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        dist.init_process_group("gloo")
        sampler = DistributedSampler(dataset) if distributed else None
        loader = DataLoader(dataset, sampler=sampler, shuffle=(sampler is None))
        other = DataLoader(dataset, batch_sampler=make_batch_sampler(dataset))
        """,
        """
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        dist.init_process_group("gloo")
        val_loader = DataLoader(val_set, batch_size=64)
        """,
        """
        # The single-GPU branch of a script with a --distributed flag.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        if args.distributed:
            dist.init_process_group("nccl")
            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        else:
            loader = DataLoader(dataset, batch_size=64, shuffle=True)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            from torch.utils.data import DataLoader

            dist.init_process_group("gloo")
            loader = DataLoader(dataset, batch_size=64, shuffle=True)
            """,
            line=5,
        ),
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=None)
        """,
        """
        from torch.utils.data import DataLoader, RandomSampler
        from torch.utils.data.distributed import DistributedSampler
        loader = DataLoader(dataset, sampler=RandomSampler(dataset))
        """,
    ]

    def on_call(self, call: CallSite) -> None:
        if call.qualname != DATALOADER or call.has_star_kwargs:
            return
        if call.arg("batch_sampler", 4) is not None:
            return
        sampler = call.arg("sampler", 3)
        if sampler is not None and not is_none(sampler) and not self._plainly_local(call, sampler):
            return
        dataset = call.arg("dataset", 0)
        if dataset is not None and self._iterable(call, dataset):
            return
        if self._is_eval_loader(call):
            return
        if on_main_rank_only(call.guards, self.ctx.qualname) or on_single_process_only(call.guards, self.ctx.qualname):
            return
        self._candidates.append(call)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._candidates: list[CallSite] = []
        self._iterable_classes: set[str] = set()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            name = dotted(base.value) or ""
            if name.endswith("IterableDataset") or name in self._iterable_classes:
                self._iterable_classes.add(node.name.value)

    def finish(self) -> None:
        # Decided at the end: a file "uses DDP" may only become clear after the loader is built.
        if not self.ctx.uses_ddp:
            return
        for call in self._candidates:
            self.report(call.node)

    def _plainly_local(self, call: CallSite, sampler: cst.BaseExpression) -> bool:
        """The sampler is visibly None or a non-distributed torch sampler (RandomSampler, ...)."""
        for value in origins(self.ctx, sampler, call.scope):
            name = dotted(value)
            if name is not None and call.scope.lookup(name):
                continue  # a name we followed to its assignments
            if is_none(value):
                continue
            q = self.ctx.qualname(value.func) if isinstance(value, cst.Call) else None
            if q and q != DISTRIBUTED_SAMPLER and q.startswith("torch.utils.data.") and q.endswith("Sampler"):
                continue
            return False  # distributed, or something we cannot see into
        return True

    def _iterable(self, call: CallSite, dataset: cst.BaseExpression) -> bool:
        for value in origins(self.ctx, dataset, call.scope):
            if isinstance(value, cst.Call):
                name = last_name(value.func) or ""
                if name in self._iterable_classes or "Iterable" in name or "Stream" in name:
                    return True
        return False

    def _is_eval_loader(self, call: CallSite) -> bool:
        parent_names = [name for name, values in call.scope.assignments.items()
                        if any(v is call.node for v in values)]
        return any(any(w in n.lower() for w in _EVAL_WORDS) for n in parent_names)
