from __future__ import annotations

import re

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.rule import Invalid, Rule

# Code that converts (or lets a flag convert) to SyncBatchNorm: `nn.SyncBatchNorm.convert_...`,
# `SyncBatchNorm(...)`, `args.sync_bn`. Prose such as "without SyncBatchNorm" does not count.
_CONVERSION = re.compile(r"SyncBatchNorm[ \t]*[.(]|convert_sync_batchnorm|\bsync_?bn\b|\bsync_batch_?norm\b", re.I)


class BatchnormWithoutSyncbatchnorm(Rule):
    """A model with BatchNorm layers is wrapped in DDP without SyncBatchNorm: each GPU normalises with its own small batch.

    ## Why it matters
    DDP synchronises gradients, not BatchNorm statistics. Each rank normalises with the mean and
    variance of its own per-GPU batch and keeps its own running statistics (rank 0's are the ones
    broadcast and saved). With large per-GPU batches this is fine and faster; with small ones
    (detection, segmentation, 3-D, large models: 1–8 samples per GPU) the statistics are noisy and
    users see lower accuracy than the same global batch on one GPU, and evaluation that differs
    from training.

    Off by default and informational: per-GPU BatchNorm is a legitimate choice (Goyal et al.
    use it on purpose). Enable it with `--extend-select DDP012`. Reported at the DDP wrap when
    the file builds `nn.BatchNorm1d/2d/3d` layers or a torchvision model made of them
    (`resnet50()`, `densenet121()`, ...) and has no code for `SyncBatchNorm` — a conversion behind
    a flag (`if args.sync_bn: model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`) counts.

    ## How to fix
    Convert before wrapping: `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`, then
    `DDP(model, device_ids=[local_rank])` — ideally behind a flag, since it costs a collective per
    BatchNorm layer in every forward.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html
    - https://github.com/pytorch/pytorch/issues/2584 (why synchronised BatchNorm matters for small per-GPU batches)
    - https://github.com/ultralytics/yolov5/pull/401 (measured: SyncBatchNorm helps at ≤ 8 images per GPU)
    """

    code = "DDP012"
    name = "batchnorm-without-syncbatchnorm"
    severity = Severity.INFO
    default_enabled = False
    MESSAGE = (
        "model with BatchNorm layers is wrapped in DDP without SyncBatchNorm: each rank normalises "
        "with its own per-GPU batch; if that batch is small, convert first with "
        "`nn.SyncBatchNorm.convert_sync_batchnorm(model)`"
    )

    VALID = [
        """
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = DDP(model, device_ids=[local_rank])
        """,
        """
        # A flag controls the conversion.
        import torch
        import torchvision
        model = torchvision.models.resnet50()
        if args.sync_bn:
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = torch.nn.parallel.DistributedDataParallel(model)
        """,
        """
        # No BatchNorm: LayerNorm needs no synchronisation.
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)))
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.nn as nn
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
            model = DDP(model.cuda(), device_ids=[local_rank])
            """,
            lines=(4,),
        ),
        Invalid(
            """
            from torchvision.models import resnet18
            from torch.nn.parallel import DistributedDataParallel
            ddp = DistributedDataParallel(resnet18(num_classes=10))
            """,
            lines=(3,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        root = model.root
        wraps = [c for c in root.calls if model.api(c) == api.DDP]
        if not wraps or _CONVERSION.search(root.source):
            return
        if any(_CONVERSION.search(m.source) for m in model.paths.modules()):
            return
        if any(_builds_batchnorm(model.api(c)) for c in root.calls):
            self.report(wraps[0].node)


def _builds_batchnorm(name: str | None) -> bool:
    return name is not None and (name in api.BATCHNORMS or name.startswith(api.BATCHNORM_MODEL_PREFIXES) or (
        name.startswith("torchvision.models.vgg") and name.endswith("_bn")))
