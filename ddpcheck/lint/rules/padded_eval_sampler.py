from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.context import DISTRIBUTED_SAMPLER, CallSite
from ddpcheck.lint.names import dotted
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.wraps import assigned_names

_EVAL_WORDS = ("val", "test", "eval", "dev")
_GATHERS = frozenset({
    "torch.distributed.all_gather", "torch.distributed.all_gather_object",
    "torch.distributed.gather", "torch.distributed.gather_object",
    "torch.distributed.all_gather_into_tensor",
})


def _eval_name(name: str | None) -> bool:
    if not name:
        return False
    lower = name.lower()
    return "train" not in lower and any(w in lower for w in _EVAL_WORDS)


class PaddedEvalSampler(Rule):
    """An evaluation loader uses a padding DistributedSampler and the metric is all-reduced: some samples count twice.

    `DistributedSampler` (with the default `drop_last=False`) pads the dataset by repeating
    samples until its length divides by the world size, so every rank gets the same number of
    batches. For training that is harmless; for a validation or test set whose metric is then
    summed with `all_reduce`, the repeated samples are counted twice.

    ## Why it matters
    The reported accuracy or loss differs from a single-GPU evaluation of the same checkpoint,
    and changes with the number of GPUs (up to `world_size - 1` duplicated samples). Small, but
    enough to make a paper's number irreproducible.

    Informational: with a large evaluation set the bias is tiny. Not reported when the sampler
    passes `drop_last=True` (a known, unbiased subset), or when the file gathers predictions
    (`all_gather*`, `gather*`), which lets it drop the padding before computing the metric.

    ## How to fix
    Evaluate exactly: gather the per-sample predictions and keep the first `len(dataset)`, or
    use a sampler that does not pad (e.g. shard with `range(rank, len(ds), world_size)` and
    all-reduce sums *and* counts), or evaluate on rank 0 only.

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
      (`drop_last=False`: "the sampler will add extra indices to make the data evenly divisible")
    - https://github.com/pytorch/pytorch/issues/25162 ("Incorrect Validation Accuracy Due to
      Distributed Sampler")
    - https://github.com/roboflow/rf-detr/issues/1507 (multi-GPU validation metrics counted the
      padding duplicates)
    """

    code = "DDP018"
    name = "padded-eval-sampler"
    severity = Severity.INFO
    # Off by default: the bias is at most world_size - 1 samples and often nil (a set that
    # divides evenly), so it is worth knowing when chasing a number, not on every commit.
    default_enabled = False

    VALID = [
        """
        import torch.distributed as dist
        from torch.utils.data import DistributedSampler
        train_sampler = DistributedSampler(train_set)
        val_sampler = DistributedSampler(val_set, shuffle=False, drop_last=True)
        dist.all_reduce(correct)
        """,
        """
        # Predictions are gathered: the padding can be dropped before the metric.
        import torch.distributed as dist
        from torch.utils.data.distributed import DistributedSampler
        test_sampler = DistributedSampler(test_set, shuffle=False)
        dist.all_gather_object(outputs, preds)
        """,
        """
        # No metric is reduced across ranks.
        from torch.utils.data import DistributedSampler
        val_sampler = DistributedSampler(val_set, shuffle=False)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            from torch.utils.data import DistributedSampler, DataLoader
            val_sampler = DistributedSampler(val_dataset, shuffle=False)
            val_loader = DataLoader(val_dataset, sampler=val_sampler)
            dist.all_reduce(correct, op=dist.ReduceOp.SUM)
            """,
            line=3,
        ),
        """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, sampler=torch.utils.data.distributed.DistributedSampler(dataset_test))
        torch.distributed.all_reduce(total)
        """,
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._samplers: list[CallSite] = []

    def on_call(self, call: CallSite) -> None:
        if call.qualname == DISTRIBUTED_SAMPLER and not call.has_keyword("drop_last") and not call.has_star_kwargs:
            self._samplers.append(call)

    def finish(self) -> None:
        if not self._samplers:
            return
        calls = self.ctx.calls
        if any(c.qualname in _GATHERS for c in calls):
            return
        if not any(self.ctx.helper_does(c, "all_reduce") for c in calls):
            return
        for call in self._samplers:
            if self._for_evaluation(call):
                self.report(
                    call.node,
                    "this evaluation DistributedSampler pads the set with repeated samples and the "
                    "metric is all-reduced, so some samples count twice; evaluate exactly (gather "
                    "predictions and trim to len(dataset)) or pass `drop_last=True`",
                )

    def _for_evaluation(self, call: CallSite) -> bool:
        names = assigned_names(call.scope, call.node)
        dataset = call.arg("dataset", 0)
        dataset_name = dotted(dataset) if dataset is not None else None
        if any(_eval_name(n) for n in names) or _eval_name(dataset_name):
            return True
        shuffle = call.arg("shuffle", 3)
        named_train = any("train" in n.lower() for n in names) or "train" in (dataset_name or "").lower()
        return isinstance(shuffle, cst.Name) and shuffle.value == "False" and not named_train
