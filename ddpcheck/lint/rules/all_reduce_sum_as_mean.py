from __future__ import annotations

import re

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import dotted
from ddpcheck.lint.rule import Invalid, Rule

_MEAN_LIKE = re.compile(r"loss|acc|mean|avg|average|metric|ppl|perplexity|error|score|top1|top5|iou|dice", re.I)
_SUM_LIKE = re.compile(r"sum|total|count|num|correct|cnt|^n_|tp|fp|fn|hist|confusion|size", re.I)
_SCALES = ("world_size", "get_world_size", "nprocs", "num_gpus", "ngpus", "n_gpu", "num_replicas",
           "num_processes", "AVG", "WORLD_SIZE")


class AllReduceSumAsMean(Rule):
    """A loss or metric is all-reduced with the default SUM and never divided by the world size.

    `dist.all_reduce(t)` adds the tensors of all ranks (`op` defaults to `ReduceOp.SUM`). A value
    that is a mean on each rank (a loss, an accuracy) becomes N times the mean.

    ## Why it matters
    Logged losses and accuracies scale with the number of GPUs (an accuracy of 380% on 4 GPUs is
    the visible case; a loss 8x too high the quiet one), early stopping and best-checkpoint
    selection compare the wrong numbers, and results change when the job is resized. Users hit
    it in research code again and again (see References).

    Not reported: `op=` other than SUM (`AVG`, `MAX`, ...), tensors named as sums or counts
    (`total`, `correct`, `num_samples`, confusion matrices), and functions that mention the world
    size (or a division of the tensor) in the loop around the reduce or, outside loops, anywhere in
    the function.

    ## How to fix
    Divide after the reduce (`t /= dist.get_world_size()`), or reduce sums and counts and divide
    them (exact when ranks hold different numbers of samples). `op=dist.ReduceOp.AVG` works on
    NCCL only.

    ## References
    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_reduce
    - https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/34 (logged loss was the sum
      over processes, "but it should be averaged")
    - https://github.com/cybertronai/transformer-xl/issues/14 (reducing a loss needs the
      division by the world size)
    - https://github.com/karpathy/nanochat/issues/403 (SUM vs AVG when reducing losses)
    """

    code = "DDP022"
    name = "all-reduce-sum-as-mean"
    severity = Severity.WARNING

    VALID = [
        """
        import torch.distributed as dist
        def reduce_mean(loss):
            rt = loss.clone()
            dist.all_reduce(rt)
            return rt / dist.get_world_size()
        """,
        """
        import torch.distributed as dist
        dist.all_reduce(correct)
        dist.all_reduce(total)
        acc = correct / total
        dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
        """,
        """
        import torch.distributed as dist
        def evaluate():
            dist.all_reduce(avg_loss)
            avg_loss /= world
        """,
        """
        # Sums and counts reduced together, divided after.
        import torch
        import torch.distributed as dist
        def evaluate(loss_sum, n):
            metrics = torch.tensor([loss_sum, n])
            dist.all_reduce(metrics)
            return metrics[0] / metrics[1]
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            def train_one_epoch():
                loss = criterion(out, y)
                reduced_loss = loss.detach().clone()
                dist.all_reduce(reduced_loss)
                print(reduced_loss.item())
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch.distributed as dist
            acc1 = accuracy(output, target)
            dist.all_reduce(acc1, op=dist.ReduceOp.SUM)
            """,
            lines=(3,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        for site in model.paths.sites():
            name = model.api(site)
            if name not in api.SUM_REDUCTIONS:
                continue
            tensor = self._unscaled_mean(site, name)
            if tensor is not None:
                self.report(
                    site.node,
                    f"`{tensor}` is summed over ranks (all_reduce's default op is SUM), so it is world_size "
                    f"times the mean; divide it by `dist.get_world_size()` after the reduce",
                    module=site.module, related=model.paths.chain(site),
                )

    def _unscaled_mean(self, site: CallSite, name: str) -> str | None:
        op = site.arg("op", 1 if name.endswith("all_reduce") else 2)
        if op is not None:
            resolved = self.model.qualname(site.module, op, site.scope) or dotted(op) or ""
            if not resolved.endswith("SUM"):
                return None
        tensor = site.arg("tensor", 0)
        written = dotted(tensor) if tensor is not None else None
        if written is None:
            return None
        last = written.rsplit(".", 1)[-1]
        if not _MEAN_LIKE.search(last) or _SUM_LIKE.search(last):
            return None
        function = site.scope.function
        if function is not None and any(dotted(v) == written for v in site.module.returns.get(function.qualname, ())):
            return None  # handed back to callers, who may divide it
        # Where a division would be: the loop around the reduce, else the whole function.
        code = site.module.code(site.loops[-1] if site.loops else site.scope.node)
        if any(s in code for s in _SCALES):
            return None
        # `loss / n`, `loss.div_(n)`, `metrics[0] / metrics[1]`, `loss.item() / n`
        if re.search(rf"\b{re.escape(written)}(\[[^\]]*\])?(\.item\(\))?\s*(/|\.div|\*|\.mul)", code):
            return None
        return written
