from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, Item, ModuleModel
from ddpcheck.lint.model.project import locate, resolved_path
from ddpcheck.lint.model.syntax import dotted
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule

# Code that converts (or lets a flag convert) to SyncBatchNorm: `nn.SyncBatchNorm.convert_...`,
# `SyncBatchNorm(...)`, `args.sync_bn`. Prose such as "without SyncBatchNorm" does not count.
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"})
_BATCHNORM_TEXT = re.compile(r"\bBatchNorm[123]d\b|\bnn\.BatchNorm|norm_layer\s*=\s*nn\.BatchNorm")
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
    (`resnet50()`, `densenet121()`, ...), or wraps a network of the project whose code builds
    them (its class, its bases, the project modules they import; `nn.Sequential(backbone, head)`
    and `resnet.__dict__[args.arch](...)` are looked into), and no code the run reaches converts
    to `SyncBatchNorm` — a conversion behind a flag
    (`if args.sync_bn: model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`) counts.

    ## How to fix
    Convert before wrapping: `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`, then
    `DDP(model, device_ids=[local_rank])` — ideally behind a flag, since it costs a collective per
    BatchNorm layer in every forward.

    Converting after the wrap (`model = nn.SyncBatchNorm.convert_sync_batchnorm(DDP(model))`),
    which older releases rejected, works in torch 2.13 and is not reported: the conversion keeps
    the same parameter and buffer objects (`weight`, `bias`, running statistics), which DDP's
    reducer and buffer broadcast already hold, and `SyncBatchNorm.forward` needs only an
    initialised process group, no handle from DDP. DDP's constructor only logs whether the model
    has SyncBatchNorm layers and refuses them on a CPU module ("SyncBatchNorm layers only work
    with GPU modules"); a conversion after the wrap skips that check, and the forward then
    refuses CPU input instead.

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
        wraps = [c for c in model.paths.sites() if model.api(c) == api.DDP]
        if not wraps:
            return
        if any(_CONVERSION.search(m.source) for m in model.paths.modules()):
            return
        root_builds = any(_builds_batchnorm(model.api(c)) for c in model.root.calls)
        for wrap in wraps:
            if root_builds and wrap.module is model.root or self._wraps_batchnorm(wrap):
                self.report(wrap.node, module=wrap.module, related=model.paths.chain(wrap))
                return

    def _wraps_batchnorm(self, wrap: CallSite) -> bool:
        """The wrapped network is a class of the project whose code (its module, its bases' and
        the project modules they import) builds BatchNorm layers and never converts them, or a
        torchvision network made of them."""
        inner = wrap.arg("module", 0)
        if inner is None:
            return False
        return self._has_batchnorm(self.model.values.at_call(wrap, inner), 2)

    def _has_batchnorm(self, values: list[Value], depth: int) -> bool:
        graph = self.model.graph
        for value in values:
            node = value.node
            call = node.value if isinstance(node, Item) and isinstance(node.value, cst.Call) else value.call
            if call is None:
                continue
            made = Value(value.module, call, value.scope, value.frame, value.at)
            name = self.model.api_of(made)
            if _builds_batchnorm(name):
                return True
            if name in _CONTAINERS and depth > 0:
                # `nn.Sequential(backbone, head)`: look at what it holds.
                parts = [v for a in call.args for v in self.model.values.of(value.module, a.value, value.scope, at=value.at)]
                if self._has_batchnorm(parts, depth - 1):
                    return True
                continue
            texts = [code_only(t) for t in self._network_texts(made)]
            if texts and any(_BATCHNORM_TEXT.search(t) for t in texts) and not any(_CONVERSION.search(t) for t in texts):
                return True
        return False

    def _network_texts(self, made: Value) -> list[str]:
        """The code of the project network a call builds: its class (and bases, and the project
        modules they import), or the whole module for `resnet.__dict__[args.arch](...)`."""
        graph = self.model.graph
        instance = graph.instance_of(made)
        if instance is not None:
            return [m.source for m, _ in graph.mro(*instance)] + self._imported_texts(instance[0])
        call = made.call
        assert call is not None
        func = call.func
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Attribute) and func.value.attr.value == "__dict__":
            name = dotted(func.value.value)
            target = self.model.resolver.name(made.module, name, made.scope) if name else None
            if target is not None and target.kind == "module" and target.path is not None:
                text = self.model.project.text(target.path)
                return [text] if text is not None else []
        return []

    def _imported_texts(self, module: ModuleModel) -> list[str]:
        path = resolved_path(module.path)
        if path is None:
            return []
        out = []
        for origin in set(module.names.aliases.values()) | set(module.names.stars):
            where = locate(path, origin)
            if where is not None and where[0] != path:
                text = self.model.project.text(where[0])
                if text is not None:
                    out.append(text)
        return out

def _builds_batchnorm(name: str | None) -> bool:
    return name is not None and (name in api.BATCHNORMS or name.startswith(api.BATCHNORM_MODEL_PREFIXES) or (
        name.startswith("torchvision.models.vgg") and name.endswith("_bn")))
