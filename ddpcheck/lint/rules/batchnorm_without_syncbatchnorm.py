from __future__ import annotations

import functools
import re
from pathlib import Path

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.ddp import documented_values, option_values
from ddpcheck.lint.model.module import CallSite, ClassInfo, Item, ModuleModel, Point, Scope, Target
from ddpcheck.lint.model.options import default_rules_out
from ddpcheck.lint.model.project import locate, resolved_path
from ddpcheck.lint.model.syntax import argument, dotted, is_false, string_text
from ddpcheck.lint.model.values import Frame, Value, off_default_branch
from ddpcheck.lint.rule import Invalid, Rule

# Code that converts (or lets a flag convert) to SyncBatchNorm: `nn.SyncBatchNorm.convert_...`,
# `SyncBatchNorm(...)`, `args.sync_bn`. Prose such as "without SyncBatchNorm" does not count.
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"})
_BATCHNORM_TEXT = re.compile(r"\bBatchNorm[123]d\b|\bnn\.BatchNorm|norm_layer\s*=\s*nn\.BatchNorm")
# `from modules import InPlaceABNSync as BatchNorm2d`, `BatchNorm2d = partial(ABN, ...)`: the
# module's own `BatchNorm2d` is another (often synchronised) layer, not torch's.
_REBOUND_BATCHNORM = re.compile(
    r"^[ \t]*from[ \t]+(?!torch\b)[\w.]+[ \t]+import[^\n]*?\bas[ \t]+(BatchNorm[123]d)\b"
    r"|^[ \t]*(BatchNorm[123]d)[ \t]*=[ \t]*(?!(?:torch\.)?nn\.BatchNorm)", re.MULTILINE)
# `isinstance(m, nn.BatchNorm2d)`, `issubclass(cls, (nn.BatchNorm1d, nn.BatchNorm2d))`, and the
# tests of a class's name, `classname.find('BatchNorm2d') != -1`, `"BatchNorm" in classname`.
_TYPE_TEST = re.compile(r"\b(?:isinstance|issubclass)\s*\([^,()]+,\s*(?:\([^()]*\)|[\w.]+)\s*\)"
                        r"|\.(?:find|index|startswith|endswith)\s*\(\s*(?P<q>[\"'])[^\"'\n]*BatchNorm[^\"'\n]*(?P=q)\s*\)"
                        r"|(?P<r>[\"'])[^\"'\n]*BatchNorm[^\"'\n]*(?P=r)\s+in\s+[\w.]+")
_BUILDS = re.compile(r"\bBatchNorm[123]d\s*\(")
_OTHER_NORM_BUILT = re.compile(r"\b(?:InstanceNorm[123]d|GroupNorm|LayerNorm)\s*\(")
_CONVERSION = re.compile(r"SyncBatchNorm[ \t]*\.|convert_sync_batchnorm|\bsync_?bn\b|\bsync_batch_?norm\b", re.I)
# `nn.SyncBatchNorm(c)` built directly: the layers of that code are synchronised; the BatchNorm
# layers that other modules of the network build are not (a backbone with SyncBatchNorm beside a
# decoder with BatchNorm2d).
# A test that a module is BatchNorm, and a norm layer built to stand in for it (`_swaps_batchnorm`).
_BATCHNORM_TEST = re.compile(r"\b(?:isinstance|issubclass)\s*\([^,()]+,\s*\(?[^()]*BatchNorm"
                             r"|(?P<q>[\"'])[^\"'\n]*BatchNorm[^\"'\n]*(?P=q)\s+(?:not\s+)?in\s+"
                             r"|\.(?:find|startswith|endswith)\s*\(\s*[\"'][^\"'\n]*BatchNorm")
_REPLACEMENT = re.compile(r"\b(?:InstanceNorm[123]d|GroupNorm|LayerNorm|FrozenBatchNorm2d|Identity)\s*\(")
_SYNC_LAYER = re.compile(r"SyncBatchNorm[ \t]*\(")
# An import statement names what the code may use (`from lib.sync_batchnorm.batchnorm import
# SynchronizedBatchNorm2d`, a module path): only the code that uses it converts.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)$",
                     re.MULTILINE)
# The text of a call with plain keyword arguments: `()`, `(pretrained=True, num_classes=10)`.
_PLAIN_CALL = re.compile(r"\((?:\s*\w+\s*=\s*[\w.]+\s*,?)*\s*\)")
# Where a sync-BN flag is only declared (`parser.add_argument("--syncBN", action="store_true",
# help=...)`): its option strings and help text. A flag nothing reads converts nothing.
_DECLARATION = re.compile(r"""(["'])-{1,2}[\w-]+\1|\bhelp[ \t]*=[ \t]*(["'])(?:(?!\2).)*\2""")


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
    (`resnet50()`, `densenet121()`, ...; not when that is built inside a class of the script
    that the wrapped networks — all instances of project classes — neither are nor name, such as
    a frozen VGG-BN in a perceptual-loss module) or a transformers one (`ResNetForImageClassification(
    config)`, also `.from_pretrained(...)`; RegNet, MobileNet, EfficientNet, and the
    segmentation networks of SegFormer and UperNet, whose heads hold a BatchNorm2d) — not on a branch the
    command line's defaults do not take —, or wraps a network of the project whose code builds
    them (its class, its bases — with the module-level code and the functions and classes of their
    module that they name, not the module's other networks —, the project modules they import,
    of which a class imported by name counts only if that code uses it, as the code it reaches
    — `from blocks import ConvAttention, NormAttention` and only `NormAttention` built —;
    `nn.Sequential(backbone, head)`
    and `resnet.__dict__[args.arch](...)` (or `getattr(resnet, args.arch)(...)`, `resnet.__getattribute__(args.arch)(...)`; only the classes
    and builder functions the key may name, `def ResNet18(): return ResNet(...)`, when they are all
    known — also through a package's `from .resnet import *` —, else the whole module, with the
    modules a package's `__init__` re-exports whole) are looked into, and so is the model apex's
    `amp.initialize(model, optimizer)` hands back (the same network, patched in place), and so are the submodules a builder
    function attaches after constructing it, `model.encoder = Encoder(...)`, and the constructor a
    network class is given and calls, `SimCLR(models.__dict__[args.arch])`; PyTorch Geometric's
    `BatchNorm` counts, and so does mmcv's `build_norm_layer(norm_cfg, ...)` where every config it
    can get is `dict(type="BN")`), or builds a model by name whose
    family is made with BatchNorm (`torchvision.models.get_model("resnet50")`,
    `timm.create_model(args.model)` with `--model` defaulting to `resnet50`, `efficientnet_b0`,
    `mobilenetv3_large_100`, `regnety_040`, ...; the name may be an option's default declared in
    another module's parser), or builds it with `eval("models." + cfg.MODEL.NAME + ".get_net")(cfg)`
    where every module of that project package whose builder fits the call builds BatchNorm, or
    with `eval("networks.resnet." + args.model)()` where every name the value may hold (literals,
    an option's default) is a class or builder function of that project module that builds it, or
    with `eval(self.arch + "_sparse_" + self.dataset_type)(...)` where every function or class
    the script defines or imports whose name fits the literal pieces is the project's, from a
    module that builds BatchNorm, or
    picks its class by key from a literal table, `{"alg": AlgNet, "vol": VolNet}[cfg.model.name](cfg)`
    or `factory = MODEL_DICT[name]; factory(**opts)` in a builder, or `MODEL_DICT[name][0](...)`
    over entries `(resnet8, ckpt_path)`, or `get_func_by_name(name)(...)` where that function
    returns `func_dict[name]`, whose every entry is a project network class or builder
    function that builds BatchNorm, or wraps a network whose class is picked that way from a table of
    project classes only, `distiller_dict[cfg.TYPE](student, teacher)`, and the networks it is
    given build BatchNorm (a
    module's `BatchNorm2d` imported from elsewhere, such as `InPlaceABNSync as BatchNorm2d`, is
    not torch's; BatchNorm that a layer builder of the module makes only behind a switch every
    call of it leaves at its default, `make_layers(cfg)` of `def make_layers(cfg,
    batch_norm=False)` or `if batch_norm == True:`, or a norm factory's `if norm_type.lower() ==
    "batch":` where every call gives another string — a literal, the default, or the caller's own
    parameter by its default, `get_norm_layer(ch, norm)` in `def __init__(self, ch,
    norm="instance")` —, is not built, nor is BatchNorm that a layer class builds in its
    `__init__` only behind such a switch (`if norm == "bn": self.norm = nn.BatchNorm2d(c)` in
    `def __init__(self, i, o, norm="none")`) where every construction the network's code makes
    leaves it off, `ConvBlock(i, o, 3)` — not where that code also names the class otherwise
    (`partial(ConvBlock, norm="bn")`, a subclass) —, also where the network's module
    imports the builder from another project module, `from layers import make_mlp`, whose other
    code (another network of that module) then does not count either —, and then neither do the
    `isinstance(m, nn.BatchNorm2d)` tests of a weight-init loop, in the class or its bases,
    count, nor do the tests of class names, `classname.find("BatchNorm2d")`), and no code the run reaches converts
    to `SyncBatchNorm` — a conversion behind a flag
    (`if args.sync_bn: model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`) counts; a
    `--sync-bn` option that is declared but never read converts nothing, nor does an import
    (`from lib.sync_batchnorm import SynchronizedBatchNorm2d` beside `nn.BatchNorm2d` layers). A library network named
    by a string (`eval("torchvision.models." + args.model)` with `--model` defaulting to
    `resnet18`, or `eval(f"torchvision.models.{args.arch}()")` that also calls it) is read by the
    names the string may hold. An option that a library's parser declares (no default in sight)
    holds what every usage command of the script's docstring passes to it (`python train.py
    --arch resnet50`); where one command leaves it out, the network is unknown. Code that builds
    `nn.SyncBatchNorm(c)` layers itself synchronises those layers only: a decoder in another
    module that builds `nn.BatchNorm2d` beside such a backbone is still reported. A network
    built with `nn.SyncBatchNorm` given as an argument (`get_model(name, norm_layer=norm)` with
    `norm = nn.SyncBatchNorm if args.distributed else nn.BatchNorm2d`, also through builders that
    pass `**kwargs` on) is not reported: the caller picks its norm layer. Nor is a network that
    went through a project function swapping its BatchNorm layers for another norm layer before
    the wrap (`model = convert_groupnorm_model(model)`, or in place, `bn_to_gn(model)`): one that
    tests modules for BatchNorm and builds `GroupNorm`, `LayerNorm`, `InstanceNorm`,
    `FrozenBatchNorm2d` or `Identity`, and no BatchNorm. Nor is a network whose BatchNorm never
    sees a batch's statistics: one the training function puts in eval mode (a linear probe, a
    frozen teacher beside the student it distils into; the student's `.train()` does not count
    for the teacher), or a project class whose constructor puts every part that builds BatchNorm
    in eval mode (`self.facenet = Backbone(...)`, then `self.facenet.eval()`, in a loss network),
    as long as nothing that may be that model is put back in train mode.

    A wrap in a function of the script that no run reaches (a second set-up left beside the one
    the `__main__` block calls, which nothing calls or names) is not reported, nor does BatchNorm
    built only in code such a set-up calls count.

    Each model wrapped is reported once in each function that wraps it (a teacher and its
    student both; the same model wrapped in two branches of one function once); a second model only
    when it is itself known to hold BatchNorm, not because the script builds BatchNorm somewhere.

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
        """
        # The network is chosen by name; the default architecture has no BatchNorm.
        import argparse
        import torchvision.models as models
        from torch.nn.parallel import DistributedDataParallel as DDP
        parser = argparse.ArgumentParser()
        parser.add_argument("--arch", default="vit_b_16")
        args = parser.parse_args()
        model = DDP(models.__dict__[args.arch]().cuda())
        """,
        """
        # A linear probe: the backbone stays in eval mode for the whole training, so BatchNorm
        # uses its frozen running statistics on every rank.
        import torch
        import torchvision
        from torch.nn.parallel import DistributedDataParallel as DDP
        def train(loader, model, criterion, optimizer):
            model.eval()
            for images, target in loader:
                loss = criterion(model(images), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        model = DDP(torchvision.models.resnet50().cuda())
        for epoch in range(90):
            train(loader, model, torch.nn.CrossEntropyLoss(), optimizer)
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
        Invalid(
            """
            # The network is chosen by name; the option's default builds a ResNet.
            import argparse
            import torchvision.models as models
            from torch.nn.parallel import DistributedDataParallel
            parser = argparse.ArgumentParser()
            parser.add_argument("-a", "--arch", default="resnet18", choices=sorted(models.__dict__))
            def build(arch, device_id):
                model = models.__dict__[arch]()
                return DistributedDataParallel(model.cuda(device_id), device_ids=[device_id])
            args = parser.parse_args()
            model = build(args.arch, 0)
            """,
            lines=(9,),
        ),
        Invalid(
            """
            # Put in eval mode for validation only: training normalises with batch statistics.
            import torchvision
            from torch.nn.parallel import DistributedDataParallel as DDP
            def train(loader, model, optimizer):
                model.train()
                for x, y in loader:
                    model(x).sum().backward()
                    optimizer.step()
            def validate(loader, model):
                model.eval()
                for x, y in loader:
                    model(x)
            model = DDP(torchvision.models.resnet50().cuda())
            for epoch in range(90):
                train(loader, model, optimizer)
                validate(val_loader, model)
            """,
            lines=(13,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        # (Not a wrap in a set-up the run never reaches: `def train_v1(...)` nothing calls.)
        wraps = [c for c in model.paths.sites() if model.api(c) == api.DDP and not model.paths.never_runs(c)]
        if not wraps:
            return
        if any(_converts(m.source) for m in model.paths.modules()):
            return
        off = {id(b) for b in _switched_off_branches(model.root)}
        # (Nor on a branch the command line's defaults do not take: `elif args.model == "resnet":`
        # with `--model` defaulting to "vit".)
        root_builders = [c for c in model.root.calls if _builds_batchnorm(model.api(c))
                         and not model.paths.never_runs(c) and not any(
            id(g.node) in off or default_rules_out(model.root, g.test, g.negated, c.scope) for g in c.guards)]
        reported: set[str] = set()
        for wrap in wraps:
            inner = wrap.arg("module", 0)
            key = " ".join(wrap.module.code(inner).split()) if inner is not None else ""
            key = f"{wrap.module.path}:{wrap.scope.qualname}:{key}"
            if key in reported:
                continue  # the same model wrapped in another branch of the same function
            # A second model (a teacher beside its student) is reported when it is itself known
            # to hold BatchNorm; BatchNorm built somewhere in the script says nothing about it.
            loose = not reported and wrap.module is model.root \
                and any(not self._built_apart(c, wrap) for c in root_builders)
            if (loose or self._wraps_batchnorm(wrap)) and not self._statistics_frozen(wrap) \
                    and not self._swapped_out(wrap) and not self._frozen_by_its_class(wrap):
                self.report(wrap.node, module=wrap.module, related=model.paths.chain(wrap))
                reported.add(key)

    def _swapped_out(self, wrap: CallSite) -> bool:
        """The wrapped network went through a function of the project that swaps its BatchNorm
        layers for another norm layer (`model = convert_groupnorm_model(model)`, or in place,
        `bn_to_gn(model)`): one that tests its modules for BatchNorm and builds the other layer
        (see `_swaps_batchnorm`). Its result is what the function builds, or the model it was
        given with the layers replaced."""
        inner = wrap.arg("module", 0)
        if inner is None:
            return False
        values = self.model.values.at_call(wrap, inner)
        for value in values:
            function = value.scope.function
            if function is not None and isinstance(function.node, cst.FunctionDef) \
                    and _swaps_batchnorm(value.module.code(function.node)):
                return True  # a leaf the converter returns (`return mod`)
        held = {id(v.node) for v in values if isinstance(v.node, cst.Call)}
        if not held:
            return False
        for site in self.model.paths.sites():
            target = site.target
            if target is None or target.kind != "function" or target.path is None or not site.node.args:
                continue
            module = self.model.project_model(target.path)
            defined = _top_level_defs(module).get(target.name) if module is not None else None
            if module is None or not isinstance(defined, cst.FunctionDef) \
                    or not _swaps_batchnorm(module.code(defined)):
                continue
            given = [v for a in site.node.args for v in self.model.values.at_call(site, a.value)]
            if any(id(v.node) in held for v in given):
                return True  # converted in place: the same network, its layers replaced
        return False

    def _statistics_frozen(self, wrap: CallSite) -> bool:
        """BatchNorm never normalises with batch statistics: the function that back-propagates
        puts the wrapped model in eval mode (a linear probe on a frozen backbone) and nothing the
        run reaches puts a model back in train mode (a `.train()` on an object the model cannot
        tell apart from it counts)."""
        sites = list(self.model.paths.sites())
        frozen = False
        for site in sites:
            if site.method not in ("train", "eval") or site.receiver is None:
                continue
            mode = site.arg("mode", 0)
            evaluating = site.method == "eval" or (mode is not None and is_false(mode))
            if evaluating:
                if not frozen and self._holds(site, wrap, certain=True) and any(
                        c.method == "backward" for c in site.module.calls_in(site.scope.qualname)):
                    frozen = True
            elif self._holds(site, wrap, certain=False):
                return False
        return frozen

    def _frozen_by_its_class(self, wrap: CallSite) -> bool:
        """The wrapped network is a project class whose constructor puts every part of it that
        builds BatchNorm in eval mode (a loss network around a pretrained face recogniser:
        `self.facenet = Backbone(...).to(device)`, then `self.facenet.eval()`), and nothing the
        run reaches may put a model back into train mode: its BatchNorm layers normalise with
        their frozen running statistics on every rank. A layer built anywhere else in the class,
        a project base class, or a `.train()` on anything that may be the model keeps the
        finding."""
        inner = wrap.arg("module", 0)
        values = self.model.values.at_call(wrap, inner) if inner is not None else []
        if not values:
            return False
        graph = self.model.graph
        for value in values:
            instance = graph.instance_of(value)
            if instance is None or len(graph.mro(*instance)) != 1:
                return False
            module, info = instance
            init = info.methods.get("__init__")
            if init is None:
                return False
            frozen = {dotted(c.receiver) for c in module.calls_in(init)
                      if c.method == "eval" and not c.node.args and c.receiver is not None and not c.guards}
            if "self" in frozen:
                continue
            held: dict[int, str] = {}  # a call that builds a part → the attribute it is set to
            for key, bindings in info.scope.assignments.items():
                for binding in bindings:
                    node = getattr(binding, "value", binding)
                    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                            and node.func.attr.value in ("to", "cuda", "eval", "float", "requires_grad_"):
                        node = node.func.value
                    held[id(node)] = key
            seen = False
            for function in info.methods.values():
                for site in module.calls_in(function):
                    target = site.target
                    found = graph.class_at(target) if target is not None and target.kind == "class" else None
                    part = held.get(id(site.node))
                    if _builds_batchnorm(self.model.api(site)) or self._builds_configured_batchnorm(site) \
                            or (found is not None and self._class_builds_batchnorm(*found, set())):
                        seen = True
                        if part not in frozen:
                            return False
                    elif target is not None and target.kind == "function" and part is not None \
                            and part not in frozen:
                        return False  # a part a project function builds: its layers unknown
            if not seen:
                return False  # the BatchNorm the network holds is built where this cannot see
        for site in self.model.paths.sites():
            if site.method == "train" and site.receiver is not None and not is_false(site.arg("mode", 0)) \
                    and self._holds(site, wrap, certain=False):
                return False
        return True

    def _holds(self, site: CallSite, wrap: CallSite, certain: bool) -> bool:
        """Whether the receiver of `site` holds the DDP model `wrap` makes (`certain`: for sure; else:
        it may, or the model cannot tell)."""
        assert site.receiver is not None
        values = self.model.values.at_call(site, site.receiver)
        for value in values:
            if value.node is wrap.node:
                return True
            if isinstance(value.node, cst.Call) and self.model.api_of(value) == api.DDP:
                continue  # another DDP model (the student trained beside a frozen teacher)
            if not certain and (self.model.graph.instance_of(value) is None or self.model.graph.is_network(value)):
                return True  # unknown, an outside object or a project network: it may be the model
        return False

    def _built_apart(self, builder: CallSite, wrap: CallSite) -> bool:
        """BatchNorm built in a class of the script (`vgg19_bn()` inside a perceptual-loss
        class) that is not what the wrap holds: every value the wrap is handed is an instance of
        a project class, and none of those classes (nor their bases) is that class or names it
        in the code it reaches."""
        owner = next((s for s in builder.scope.chain() if s.kind == "class"), None)
        inner = wrap.arg("module", 0)
        if owner is None or inner is None:
            return False
        while owner.parent is not None and owner.parent.kind == "class":
            owner = owner.parent  # (the outermost class: a nested one is part of it)
        short = owner.qualname.rpartition(".")[2]
        values = self.model.values.at_call(wrap, inner)
        if not values:
            return False
        for value in values:
            node = value.node
            call = node.value if isinstance(node, Item) and isinstance(node.value, cst.Call) else value.call
            instances = self.model.graph.instances_of(Value(value.module, call, value.scope, value.frame, value.at)) \
                if call is not None else []
            if not instances:
                return False  # a network the model cannot name: BatchNorm in the script may be in it
            for module, info in (c for instance in instances for c in self.model.graph.mro(*instance)):
                if module is builder.module and info.scope is owner:
                    return False
                if re.search(rf"\b{re.escape(short)}\b", code_only(_reachable_code(module, info)[0])):
                    return False
        return True

    def _wraps_batchnorm(self, wrap: CallSite) -> bool:
        """The wrapped network is a class of the project whose code (its module, its bases' and
        the project modules they import) builds BatchNorm layers and never converts them, or a
        torchvision network made of them."""
        inner = wrap.arg("module", 0)
        if inner is None:
            return False
        return self._has_batchnorm(self.model.values.at_call(wrap, inner), 3)

    def _has_batchnorm(self, values: list[Value], depth: int) -> bool:
        graph = self.model.graph
        for value in values:
            if off_default_branch(value):
                continue  # built on a branch the command line's defaults do not take (`--model PatchTST`)
            node = value.node
            call = node.value if isinstance(node, Item) and isinstance(node.value, cst.Call) else value.call
            if call is None:
                continue
            made = Value(value.module, call, value.scope, value.frame, value.at)
            if self._given_sync_norm(made):
                continue  # `build(norm_layer=nn.SyncBatchNorm if distributed else nn.BatchNorm2d)`
            name = self.model.api_of(made)
            if _builds_batchnorm(name):
                return True
            if name in _CONTAINERS and depth > 0:
                # `nn.Sequential(backbone, head)`: look at what it holds.
                parts = [v for a in call.args for v in self.model.values.of(value.module, a.value, value.scope, at=value.at)]
                if self._has_batchnorm(parts, depth - 1):
                    return True
                continue
            if any(_builds_batchnorm(n) for n in self._chosen_by_name(made) + self._created_by_name(made)):
                return True
            if self._evaluated_by_name(made) or self._registry_builds_batchnorm(made):
                return True
            texts = [code_only(t) for t in self._network_texts(made)]
            if any(_converts(t) for t in texts):
                continue
            if texts and any(_unsynced_batchnorm(t) for t in texts):
                return True
            instance = graph.instance_of(made)
            if instance is None and depth > 0 and call.args and self._picked_classes(made):
                # `distiller_dict[cfg.TYPE](student, teacher, cfg)`: the class is one of the
                # project's, not known which; the networks it is given are its parts.
                parts = [v for a in call.args for v in self.model.values.of(value.module, a.value, value.scope, at=value.at)]
                if self._has_batchnorm(parts, depth - 1):
                    return True
            if instance is not None and depth > 0:
                # The networks it is given (`YOLOX(backbone, head)`) and those it builds.
                parts = [v for a in call.args for v in self.model.values.of(value.module, a.value, value.scope, at=value.at)]
                if self._has_batchnorm(parts, depth - 1) or self._class_builds_batchnorm(*instance, set()):
                    return True
                if any(_builds_batchnorm(n) for n in self._constructors_given(made, instance)) \
                        or self._project_constructors_given(made, instance):
                    return True
                if self._has_batchnorm(self._attached(made), depth - 1):
                    return True
        return False

    def _given_sync_norm(self, made: Value) -> bool:
        """The call that builds the network is given `nn.SyncBatchNorm` as an argument (or a name
        that may hold it: `norm = nn.SyncBatchNorm if args.distributed else nn.BatchNorm2d`;
        `resnet50(norm_layer=norm)`): the caller picks the norm layer its code builds, and picks
        the synchronised one (in the runs that wrap it, where the choice follows a flag)."""
        call = made.call
        assert call is not None
        return self._passes_sync_norm(made.module, call, made.scope, made.frame, made.at, 3)

    def _passes_sync_norm(self, module: ModuleModel, call: cst.Call, scope: Scope, frame: Frame | None,
                          at: Point | None, depth: int) -> bool:
        """See `_given_sync_norm`. Arguments passed on whole (`return MODELS[name](**kwargs)` in a
        builder being followed) are read at the caller's call."""
        for arg in call.args:
            if arg.star and frame is not None and depth > 0 and isinstance(arg.value, cst.Name) \
                    and self._is_star_parameter(frame, arg.value.value):
                site = frame.call
                if self._passes_sync_norm(site.module, site.node, site.scope, frame.caller, site.point, depth - 1):
                    return True
                continue
            for value in self.model.values.of(module, arg.value, scope, frame, at=at):
                node = value.node
                if isinstance(node, (cst.Name, cst.Attribute)) \
                        and self.model.qualname(value.module, node, value.scope) == api.SYNC_BATCHNORM:
                    return True
        return False

    @staticmethod
    def _is_star_parameter(frame: Frame, name: str) -> bool:
        """`name` is the `*args` or `**kwargs` parameter of the function `frame` follows."""
        params = frame.function.node.params
        return any(isinstance(p, cst.Param) and p.name.value == name for p in (params.star_arg, params.star_kwarg))

    def _registry_builds_batchnorm(self, made: Value) -> bool:
        """`{"alg": AlgNet, "vol": VolNet}[cfg.model.name](cfg)`, or `factory =
        MODEL_DICT[name]; factory(**opts)`, or `MODEL_DICT[name][0](num_classes=n)` over entries
        `(resnet8, ckpt_path)`, or `get_func_by_name(name)(...)` where that function returns
        `func_dict[name]`: a network class or builder function picked by key from a literal
        table. True when every one the callee may be is a project class or builder function
        that builds BatchNorm; an entry the model cannot read leaves the choice unknown."""
        picked = self._registry_picks(made)
        if picked is None:
            return False
        return all(self._target_builds_batchnorm(self._entry_target(value)) for value in picked)

    def _target_builds_batchnorm(self, target: Target | None) -> bool:
        """`target` is a project network class whose code builds BatchNorm, or a builder function
        of the project (`def resnet8(**kw): return ResNet(8, ...)`) whose module does, neither
        converting them."""
        found = self.model.graph.class_at(target) if target is not None else None
        if found is not None:
            return self._instance_builds_batchnorm(found)
        texts = self._definition_texts(target) if target is not None and target.kind == "function" else None
        code = [code_only(t) for t in texts or ()]
        return bool(code) and not any(_converts(t) for t in code) and any(_unsynced_batchnorm(t) for t in code)

    def _project_network_by_name(self, made: Value, text: cst.BaseExpression) -> bool:
        """`eval("networks.resnet." + args.model)()`: a network of a project module named by the
        module's dotted path and a value whose strings are known (literals, an option's default);
        True when every name it may hold is a class or builder function of that module that
        builds BatchNorm."""
        if not isinstance(text, cst.BinaryOperation) or not isinstance(text.operator, cst.Add):
            return False
        prefix, named = string_text(text.left), text.right
        if prefix is None or not prefix.endswith(".") or string_text(named) is not None:
            return False
        resolver = self.model.resolver
        target = resolver.name(made.module, prefix[:-1], made.scope)
        if target is None or target.external is not None or target.kind != "module":
            return False
        names = self._names_of(made, named)
        return bool(names) and all(
            n.isidentifier() and self._target_builds_batchnorm(resolver.name(made.module, f"{prefix}{n}", made.scope))
            for n in names)

    def _registry_picks(self, made: Value) -> list[Value] | None:
        """The entries of the literal table(s) the callee of `made` is picked from by key (see
        `_registry_builds_batchnorm`); None where the callee is no such pick, or an entry or a
        table cannot be read. An integer index after the key (`TABLE[key][0]`) takes that
        element of each entry (a tuple or list)."""
        call = made.call
        assert call is not None
        func = call.func
        # (Also a function that returns the table's entry: `get_func_by_name(name)(...)` over
        # `def get_func_by_name(name): return func_dict[name]`.)
        if not isinstance(func, (cst.Subscript, cst.Name, cst.Call)):
            return None
        picked: list[Value] = []
        for value in self.model.values.of(made.module, func, made.scope, made.frame, at=made.at):
            node = value.node
            if isinstance(node, cst.Subscript):
                table_expr: cst.BaseExpression = node.value
                index = _element_index(node) if isinstance(node.value, cst.Subscript) else None
                if index is not None:
                    assert isinstance(node.value, cst.Subscript)
                    table_expr = node.value.value
                tables = self.model.values.of(value.module, table_expr, value.scope, value.frame, at=value.at)
                for table in tables:
                    if not isinstance(table.node, cst.Dict) or not table.node.elements:
                        return None
                    for element in table.node.elements:
                        if not isinstance(element, cst.DictElement):
                            return None
                        entry = element.value
                        if index is not None:
                            if not isinstance(entry, (cst.Tuple, cst.List)) or len(entry.elements) <= index \
                                    or isinstance(entry.elements[index], cst.StarredElement):
                                return None
                            entry = entry.elements[index].value
                        picked.append(Value(table.module, entry, table.scope, table.frame, table.at))
                if not tables:
                    return None
            else:
                picked.append(value)
        if len(picked) < 2 or any(v.node is func for v in picked):
            return None  # one class is followed as any construction is; the name itself: unknown
        return picked

    def _picked_classes(self, made: Value) -> bool:
        """The callee of `made` is picked by key from a literal table whose every entry is a
        project class (`distiller_dict[cfg.TYPE](student, teacher, cfg)`): a network of the
        project, whatever the key, so the networks it is handed are its parts."""
        picked = self._registry_picks(made)
        if picked is None:
            return False
        targets = [self._entry_target(value) for value in picked]
        return all(t is not None and self.model.graph.class_at(t) is not None for t in targets)

    def _entry_target(self, value: Value) -> Target | None:
        """What a table entry names (`AlgNet`, `models.VolNet`, `resnet8`), or None."""
        node = value.node
        name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        return self.model.resolver.name(value.module, name, value.scope) if name else None

    def _instance_builds_batchnorm(self, instance: tuple[ModuleModel, ClassInfo]) -> bool:
        texts = [code_only(t) for t in self._instance_texts(instance)]
        if any(_converts(t) for t in texts):
            return False
        return any(_unsynced_batchnorm(t) for t in texts) \
            or self._class_builds_batchnorm(*instance, set())

    def _attached(self, made: Value) -> list[Value]:
        """What the function that builds the network attaches to it afterwards
        (`model = Hybrid(vocab); model.encoder = ConformerEncoder(...); return model`): the
        values of `name.attr = ...` in that scope, for each name bound to the construction."""
        call = made.call
        scope = made.scope
        names = [n for n, bound in scope.assignments.items() if "." not in n
                 and any(getattr(b, "value", b) is call for b in bound)]
        out: list[Value] = []
        for name in names:
            for key, bound in scope.assignments.items():
                if key.startswith(name + ".") and key.count(".") == 1:
                    for binding in bound:
                        out += self.model.values.of(made.module, binding, scope, made.frame)
        return out

    def _given(self, made: Value, instance: tuple[ModuleModel, ClassInfo]) -> list[Value]:
        """What a construction passes, uncalled, to the parameters the class's constructor calls
        (`MoCo(resnet50, dim)` with `self.encoder_q = base_encoder(num_classes=dim)`)."""
        module, info = instance
        init = self.model.graph.method(module, info, "__init__")
        site = made.module.call_at(made.call) if made.call is not None else None
        if init is None or site is None:
            return []
        called = {c.dotted for c in init.module.calls_in(init.qualname)}
        out: list[Value] = []
        for param in init.params():
            if param.name not in called:
                continue
            passed = self.model.graph.argument_for(site, init, param, "constructor")
            if not isinstance(passed, cst.BaseExpression):
                continue
            for value in self.model.values.of(made.module, passed, made.scope, made.frame, at=made.at):
                if isinstance(value.node, (cst.Name, cst.Attribute, cst.Subscript)):
                    out.append(value)
        return out

    def _constructors_given(self, made: Value, instance: tuple[ModuleModel, ClassInfo]) -> list[str]:
        """`SimCLR(models.__dict__[args.arch], dim)` whose constructor builds its encoder by
        calling what it is given (`self.encoder = base_encoder(num_classes=dim)`): the API names
        of the constructors passed, uncalled, to a parameter the constructor calls."""
        out: list[str] = []
        for value in self._given(made, instance):
            node = value.node
            assert isinstance(node, (cst.Name, cst.Attribute, cst.Subscript))
            out += self._chosen_by_name(Value(value.module, node, value.scope, value.frame, value.at), node)
            if not isinstance(node, cst.Subscript):
                name = self.model.qualname(value.module, node, value.scope)
                if name is not None:
                    out.append(name)
        return out

    def _project_constructors_given(self, made: Value, instance: tuple[ModuleModel, ClassInfo]) -> bool:
        """A project network class or builder function passed uncalled to such a parameter
        (`base_encoder = resnet50` of the project's `moco/resnet.py`) that builds BatchNorm: its
        class, or the module that defines the function, builds unsynchronised BatchNorm."""
        for value in self._given(made, instance):
            node = value.node
            name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
            target = self.model.resolver.name(value.module, name, value.scope) if name else None
            if target is None or target.path is None or target.external is not None:
                continue
            if target.kind == "class":
                found = self.model.graph.class_at(target)
                if found is not None and self._instance_builds_batchnorm(found):
                    return True
            elif target.kind == "function":
                text = self.model.project.text(target.path)
                code = code_only(text) if text is not None else ""
                if code and not _converts(code) and _unsynced_batchnorm(code):
                    return True
        return False

    def _chosen_by_name(self, made: Value, func: cst.BaseExpression | None = None) -> list[str]:
        """`torchvision.models.__dict__[arch](...)`: the API names the key may select — literal
        strings, or the default of the command-line option it comes from (`--arch resnet18`).
        `func`: the callee when `made` is not the call of it."""
        if func is None:
            call = made.call
            assert call is not None
            func = call.func
        chosen = _looked_up_by_name(func)
        if chosen is None:
            return []
        holder, key = chosen
        owner = self.model.qualname(made.module, holder, made.scope)
        if owner is None:
            return []
        return [f"{owner}.{text}" for text in self._names_of(made, key) if text.isidentifier()]

    def _created_by_name(self, made: Value) -> list[str]:
        """`torchvision.models.get_model("resnet50")`, `timm.create_model(args.model)`: the model
        the name (a literal, or the default of the option it comes from) builds, as the API name
        of its constructor (`torchvision.models.resnet50`), or `timm:<name>`."""
        factory = self.model.api_of(made)
        if factory not in api.MODEL_BY_NAME:
            return []
        call = made.call
        assert call is not None
        name = argument(call, "model_name" if factory.startswith("timm") else "name", 0)
        if name is None:
            return []
        out = []
        for text in self._names_of(made, name):
            out.append(f"timm:{text}" if factory.startswith("timm") else f"torchvision.models.{text}")
        return out

    def _evaluated_by_name(self, made: Value) -> bool:
        """`eval("models." + cfg.MODEL.NAME + ".get_pose_net")(cfg)`: the builder is the function
        of that name in one of the project package's modules; True when every module of the
        package that defines it builds BatchNorm layers (its code or the project modules it
        imports) and none converts them. A name the model cannot list stays unknown."""
        call = made.call
        assert call is not None
        func = call.func
        if dotted(func) == "eval" and len(call.args) == 1 and not made.scope.lookup("eval"):
            # `eval(f"torchvision.models.{args.arch}()")`: the string builds the network itself.
            return self._library_network_by_name(made, call.args[0].value, built=True)
        if not (isinstance(func, cst.Call) and dotted(func.func) == "eval" and len(func.args) == 1) \
                or made.scope.lookup("eval"):
            return False
        if self._library_network_by_name(made, func.args[0].value) \
                or self._project_network_by_name(made, func.args[0].value):
            return True
        parts = _string_parts(func.args[0].value)
        if self._global_by_pattern(made, parts):
            return True
        if len(parts) < 3 or not isinstance(parts[0], str) or not isinstance(parts[-1], str):
            return False
        package, builder = parts[0], parts[-1]
        if not (package.endswith(".") and package[:-1].replace(".", "_").isidentifier()
                and builder.startswith(".") and builder[1:].isidentifier()):
            return False
        target = self.model.resolver.name(made.module, package[:-1], made.scope)
        if target is None or target.kind != "module" or target.path is None or target.path.name != "__init__.py":
            return False
        defines = re.compile(rf"^def[ \t]+{builder[1:]}[ \t]*\(", re.MULTILINE)
        found = 0
        for path in sorted(target.path.parent.glob("*.py")):
            text = self.model.project.text(path)
            if path.name == "__init__.py" or text is None or not defines.search(text):
                continue
            module = self.model.project_model(path)
            if module is None:
                return False
            if builder[1:] in module.functions and not _binds(module.functions[builder[1:]], call):
                continue  # its parameters do not fit this call: not the builder the name picks
            texts = [code_only(t) for t in [text, *self._imported_texts(module)]]
            if any(_converts(t) for t in texts) or not any(_unsynced_batchnorm(t) for t in texts):
                return False
            found += 1
        return found > 0

    def _global_by_pattern(self, made: Value, parts: list[str | None]) -> bool:
        """`eval(self.arch + "_sparse_" + self.dataset_type)(...)`: `eval` reads the module's own
        names, so the builder is one of the functions or classes the module defines or imports
        whose name fits the string's literal pieces (`resnet_56_sparse_cifar10`,
        `VGG_16_bn_sparse_cifar10`, ...). True when there is one and every one is the project's,
        from a module that builds BatchNorm (its code or the project modules it imports) and
        converts none."""
        literal = [p for p in parts if p is not None]
        if None not in parts or sum(len(p) for p in literal) < 3 or not all(re.fullmatch(r"\w+", p) for p in literal):
            return False
        pattern = re.compile("".join(re.escape(p) if p is not None else r"\w+" for p in parts))
        module = made.module
        names = {n for n in (*module.names.aliases, *module.functions, *module.classes)
                 if "." not in n and pattern.fullmatch(n)}
        if not names:
            return False
        for name in sorted(names):
            target = self.model.resolver.name(module, name, module.module_scope)
            if target is None or target.external is not None or target.path is None \
                    or target.kind not in ("function", "class"):
                return False
            other = self.model.project_model(target.path)
            if other is None:
                return False
            texts = [code_only(t) for t in [other.source, *self._imported_texts(other)]]
            if any(_converts(t) for t in texts) or not any(_unsynced_batchnorm(t) for t in texts):
                return False
        return True

    def _library_network_by_name(self, made: Value, text: cst.BaseExpression, built: bool = False) -> bool:
        """`eval("torchvision.models." + args.model)(pretrained=True)`: a library's network
        named by a prefix and a value whose strings are known (literals, an option's default);
        True when every name it may hold is a network made of BatchNorm layers. `built`: the
        string also calls it, `f"torchvision.models.{args.arch}()"` (plain arguments only)."""
        prefix: str | None = None
        named: cst.BaseExpression | None = None
        parts = list(text.parts) if isinstance(text, cst.FormattedString) else []
        if built:
            # The call's text at the end: `()`, `(pretrained=True)`, `(num_classes=10)`.
            tail = parts.pop() if len(parts) == 3 else None
            if not isinstance(tail, cst.FormattedStringText) or not _PLAIN_CALL.fullmatch(tail.value):
                return False
        if isinstance(text, cst.BinaryOperation) and isinstance(text.operator, cst.Add) and not built:
            prefix, named = string_text(text.left), text.right
        elif len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) \
                and isinstance(parts[1], cst.FormattedStringExpression):
            prefix, named = parts[0].value, parts[1].expression
        if prefix is None or named is None or not prefix.endswith(".") or string_text(named) is not None:
            return False
        target = self.model.resolver.name(made.module, prefix[:-1], made.scope)
        if target is None or target.external is None:
            return False
        names = self._names_of(made, named)
        return bool(names) and all(n.isidentifier() and _builds_batchnorm(f"{target.external}.{n}") for n in names)

    def _names_of(self, made: Value, expr: cst.BaseExpression) -> list[str]:
        """The strings `expr` may hold: literals, or the default of the command-line option it
        reads, or what the script's documented commands pass to an option declared out of sight."""
        names = []
        for value in self.model.values.of(made.module, expr, made.scope, made.frame, at=made.at):
            held = option_values(self.model, value)
            if not held:
                # An option a library's parser declares: the values the script's documented
                # commands give it.
                names += documented_values(self.model, value)
            for one in held or [value]:
                text = string_text(one.node) if isinstance(one.node, cst.BaseExpression) else None
                if text is not None:
                    names.append(text)
        return names

    def _class_builds_batchnorm(self, module: ModuleModel, info: ClassInfo, seen: set[object],
                                built_by: CallSite | None = None) -> bool:
        """Whether a project network class, or a project class its methods build, builds BatchNorm
        layers (a bounded walk: at most 32 classes), none of their modules converting them. A
        class reached through its construction `built_by` builds nothing behind a switch of its
        `__init__` that this call leaves off (`ConvBlock(c, c)` of `def __init__(self, i, o,
        norm="none")`, `if norm == "bn":`)."""
        graph = self.model.graph
        for owner_module, owner in graph.mro(module, info):
            off: frozenset[int] = frozenset()
            if owner is info and built_by is not None:
                off = frozenset(id(b) for b in _constructor_left_off(owner.node, built_by))
            key: object = (id(owner), off) if off else id(owner)
            if key in seen or len(seen) >= 32:
                continue
            seen.add(key)
            if _converts(owner_module.source):
                return False
            if _SYNC_LAYER.search(code_only(owner_module.source)):
                continue  # its own layers are built synchronised
            for function in owner.methods.values():
                for site in owner_module.calls_in(function):
                    if off and any(id(g.node) in off and not g.negated for g in site.guards):
                        continue
                    if _builds_batchnorm(self.model.api(site)) or self._builds_configured_batchnorm(site):
                        return True
                    target = site.target
                    found = graph.class_at(target) if target is not None and target.kind == "class" else None
                    if found is not None and self._class_builds_batchnorm(*found, seen, site):
                        return True
        return False

    def _builds_configured_batchnorm(self, site: CallSite) -> bool:
        """`build_norm_layer(norm_cfg, channels)` (mmcv) where every config the model sees is
        `dict(type="BN")` (a parameter's default, what callers pass, through `copy.deepcopy`):
        mmcv builds `nn.BatchNorm2d` for "BN" ("SyncBN", "GN", "LN" are other layers)."""
        if self.model.api(site) not in api.MMCV_NORM_BUILDERS:
            return False
        cfg = site.arg("cfg", 0)
        if cfg is None:
            return False
        kinds: set[str | None] = set()
        todo = self.model.values.at_call(site, cfg)
        while todo and len(kinds) < 8:
            value = todo.pop()
            node = value.node
            if isinstance(node, cst.Call) and self.model.qualname(value.module, node.func, value.scope) \
                    in ("copy.deepcopy", "copy.copy") and node.args:
                todo += self.model.values.of(value.module, node.args[0].value, value.scope, value.frame, at=value.at)
                continue
            kinds.add(_norm_type(node) if isinstance(node, cst.BaseExpression) else None)
        return bool(kinds) and all(k in api.MMCV_BATCHNORM_TYPES for k in kinds)

    def _network_texts(self, made: Value) -> list[str]:
        """The code of the project network a call builds: its class (and bases, and the project
        modules they import), or the whole module for `resnet.__dict__[args.arch](...)`."""
        graph = self.model.graph
        instance = graph.instance_of(made)
        if instance is not None:
            return self._instance_texts(instance)
        call = made.call
        assert call is not None
        func = call.func
        chosen = _looked_up_by_name(func)
        if chosen is not None:
            name = dotted(chosen[0])
            target = self.model.resolver.name(made.module, name, made.scope) if name else None
            if target is not None and target.kind == "module" and target.path is not None:
                # The classes and builder functions the key may name, when every one is known:
                # only those are built (`--arch TinyMLP` of a module that also holds a ResNet).
                # A package's networks are usually re-exported (`from .resnet import *` in its
                # `__init__`): the name is looked up as the package's attribute.
                names = self._names_of(made, chosen[1])
                found = [self.model.resolver.in_module(Path(target.path), n) for n in names if n.isidentifier()]
                known = [self._definition_texts(t) for t in found if t is not None]
                if names and len(known) == len(names) and all(k is not None for k in known):
                    return [t for k in known if k is not None for t in k]
                return self._module_texts(Path(target.path))
        return []

    def _module_texts(self, path: Path) -> list[str]:
        """The code of the project module at `path` and of the project modules it re-exports
        whole (`from .resnet import *` in a package's `__init__`): what its attributes may be."""
        out: list[str] = []
        todo: list[Path] = [path]
        seen: set[Path] = set()
        while todo and len(seen) < 32:
            here = todo.pop()
            if here in seen:
                continue
            seen.add(here)
            text = self.model.project.text(here)
            if text is not None:
                out.append(text)
            index = self.model.project.index(here)
            for star in index.stars if index is not None else ():
                where = locate(here, star)
                if where is not None and not where[1]:
                    todo.append(where[0])
        return out

    def _definition_texts(self, target: Target) -> list[str] | None:
        """The code of the project class or builder function `target` names (`_instance_texts`;
        for a function, what it reaches in its module and what that imports from the project,
        as for a class), or None where it names neither."""
        found = self.model.graph.class_at(target)
        if found is not None:
            return self._instance_texts(found)
        if target.kind != "function" or target.path is None:
            return None
        module = self.model.project_model(target.path)
        function = _top_level_defs(module).get(target.name) if module is not None else None
        if module is None or not isinstance(function, cst.FunctionDef):
            return None
        parts = [_reachable_from(module, function, ())]
        parts += self._imported_parts(module, _names_used(module, [t for t, _ in parts]))
        texts = [text for text, _ in parts]
        if any(off for _, off in parts) and not any(_BUILDS.search(code_only(t)) for t in texts):
            texts = [_TYPE_TEST.sub("", t) for t in texts]
        return texts

    def _instance_texts(self, instance: tuple[ModuleModel, ClassInfo]) -> list[str]:
        """The code of a project network class: its class and bases (`_reachable_code`) and what
        its module imports from the project (`_imported_parts`)."""
        parts = [_reachable_code(m, info) for m, info in self.model.graph.mro(*instance)]
        parts += self._imported_parts(instance[0], _names_used(instance[0], [t for t, _ in parts]))
        texts = [text for text, _ in parts]
        if any(off for _, off in parts) and not any(_BUILDS.search(code_only(t)) for t in texts):
            # The only BatchNorm layers were behind switches left off: the class tests of a
            # weight-init loop (in the class or its bases) name layers nothing builds.
            texts = [_TYPE_TEST.sub("", t) for t in texts]
        return texts

    def _imported_parts(self, module: ModuleModel, used: set[str]) -> list[tuple[str, bool]]:
        """The code a network's module imports from the project: for `from helpers import
        make_mlp`, the definition it names and what that reaches in its module (see
        `_reachable_code`; a switch every call in the importing module leaves off builds
        nothing), not the helper module's other code; for `import helpers` or `from helpers
        import *`, the whole module. Only the imports the network's code reads (`used`) count: a
        module of several blocks builds BatchNorm in some; the network that uses others does not.
        With whether a switch left BatchNorm layers off."""
        path = resolved_path(module.path)
        if path is None:
            return []
        out: list[tuple[str, bool]] = []
        whole: set[Path] = set()
        for local, origin in sorted(module.names.aliases.items()):
            if local.split(".", 1)[0] not in used:
                continue
            where = locate(path, origin)
            if where is None or where[0] == path:
                continue
            target = self.model.project_model(where[0]) if where[1] and "." not in where[1] else None
            if target is not None and _top_level_defs(target).get(where[1]) is not None:
                out.append(_imported_code(target, where[1], module, local))
            else:
                whole.add(where[0])
        for origin in module.names.stars:
            where = locate(path, origin)
            if where is not None and where[0] != path:
                whole.add(where[0])
        for file in sorted(whole):
            text = self.model.project.text(file)
            if text is not None:
                out.append((text, False))
        return out

    def _imported_texts(self, module: ModuleModel) -> list[str]:
        """The texts of the project modules `module` imports."""
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


def _element_index(node: cst.Subscript) -> int | None:
    """The non-negative integer literal of `x[0]`, else None."""
    if len(node.slice) != 1:
        return None
    index = node.slice[0].slice
    if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
        number = index.value.evaluated_value
        return number if isinstance(number, int) else None
    return None


def _looked_up_by_name(func: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """`models.__dict__[key]` or `getattr(models, key)`: the object a network is looked up in by
    name, and the expression of the name."""
    if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Attribute) \
            and func.value.attr.value == "__dict__" and len(func.slice) == 1:
        key = func.slice[0].slice
        return (func.value.value, key.value) if isinstance(key, cst.Index) else None
    if isinstance(func, cst.Call) and dotted(func.func) == "getattr" and len(func.args) in (2, 3) \
            and not any(a.keyword is not None or a.star for a in func.args):
        return func.args[0].value, func.args[1].value
    # `models.__getattribute__(key)`: the attribute look-up `getattr` makes, called by its name.
    if isinstance(func, cst.Call) and isinstance(func.func, cst.Attribute) \
            and func.func.attr.value == "__getattribute__" and len(func.args) == 1 \
            and func.args[0].keyword is None and not func.args[0].star:
        return func.func.value, func.args[0].value
    return None


def _names_used(module: ModuleModel, texts: list[str]) -> set[str]:
    """The names the code in `texts` reads, its module's import statements left out."""
    imports = [module.code(stmt) for stmt in module.tree.body
               if isinstance(stmt, cst.SimpleStatementLine)
               and any(isinstance(part, (cst.Import, cst.ImportFrom)) for part in stmt.body)]
    names: set[str] = set()
    for text in texts:
        for statement in imports:
            text = text.replace(statement, "")
        names |= set(re.findall(r"[A-Za-z_]\w*", code_only(text)))
    return names


@functools.lru_cache(maxsize=64)  # the same project modules' texts are asked about for every script
def _reachable_code(module: ModuleModel, info: ClassInfo) -> tuple[str, bool]:
    """The code of class `info` and of what it can reach in its module (see `_reachable_from`),
    and whether a switch left BatchNorm layers off."""
    return _reachable_from(module, info.node, ())


def _top_level_defs(module: ModuleModel) -> dict[str, cst.FunctionDef | cst.ClassDef]:
    return {stmt.name.value: stmt for stmt in module.tree.body if isinstance(stmt, (cst.FunctionDef, cst.ClassDef))}


@functools.lru_cache(maxsize=256)
def _imported_code(module: ModuleModel, name: str, importer: ModuleModel, local: str) -> tuple[str, bool]:
    """`_reachable_from` for the definition `name` of `module` that `importer` imports as
    `local`: the importer's calls of it count as calls of the function."""
    calls = tuple(c for c in _scoped_calls_of(importer) if isinstance(c[0].func, cst.Name) and c[0].func.value == local)
    return _reachable_from(module, _top_level_defs(module)[name], calls)


def _reachable_from(module: ModuleModel, root: cst.FunctionDef | cst.ClassDef,
                    external: tuple[_Scoped, ...]) -> tuple[str, bool]:
    """The code of the definition `root` and of what it can reach in its module: the module-level
    statements other than definitions, and the top-level functions and classes its code names,
    followed on. A module of many networks (a model zoo in one file) builds BatchNorm in some of
    them; the one that is built counts, not its neighbours. A layer builder's branch behind a
    switch that every call reached leaves off (`make_layers(cfg, in_channels)` of `def
    make_layers(cfg, in_channels=3, batch_norm=False)`, `if batch_norm: layers += [conv,
    nn.BatchNorm2d(v), ...]`) builds nothing; where that removes BatchNorm layers, the
    class tests of a weight-init loop (`isinstance(m, nn.BatchNorm2d)`) only name the layers
    the builder can make and go too."""
    defs = _top_level_defs(module)
    outside = [stmt for stmt in module.tree.body if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef))]
    todo: list[cst.CSTNode] = [root]
    seen = {root.name.value}
    followed: list[cst.CSTNode] = [*outside]
    while todo:
        node = todo.pop()
        followed.append(node)
        for name in set(re.findall(r"[A-Za-z_]\w*", code_only(module.code(node)))):
            if name in defs and name not in seen:
                seen.add(name)
                todo.append(defs[name])
    by_definition, elsewhere = _calls_by_top_level(module)
    calls = list(elsewhere)  # the calls of `outside`, which is always followed
    for node in followed[len(outside):]:
        if id(node) in by_definition:
            calls += by_definition[id(node)]
        elif node is root:  # a class written inside a function or a block
            calls += _scoped_calls(node)
    parts = []
    switched_off = False
    for node in followed:
        off: list[cst.If] = []
        if isinstance(node, cst.ClassDef) and node is not root:
            off = _constructor_switched_off(module, node, followed, calls)
        elif isinstance(node, cst.FunctionDef):
            callers = [c for c in calls if isinstance(c[0].func, cst.Name) and c[0].func.value == node.name.value]
            off = _switched_off(node, callers + list(external) if node is root else callers)
        if not off:
            parts.append(module.code(node))
            continue
        kept = node.visit(_DropBranches(off))
        if any(_BATCHNORM_TEXT.search(module.code(b)) for b in off):
            switched_off = True
        parts.append(module.code(kept) if isinstance(kept, cst.CSTNode) else "")
    text = "\n".join(parts)
    if switched_off and not _BUILDS.search(code_only(text)):
        text = _TYPE_TEST.sub("", text)
    return text, switched_off


def _constructor_left_off(node: cst.ClassDef, site: CallSite) -> list[cst.If]:
    """The branches of class `node`'s `__init__` that the construction `site` leaves off (see
    `_switched_off`)."""
    init = _unbound_init(node)
    if init is None:
        return []
    scope: Scope | None = site.scope
    while scope is not None and scope.kind != "function":
        scope = scope.parent
    outer = scope.node if scope is not None and isinstance(scope.node, cst.FunctionDef) else None
    # A value handed on from the constructing code's own parameter (`ConvUnit(c, c, norm=norm)`)
    # is what that code was given, which its default does not tell.
    return _switched_off(init, [(site.node, outer)], outer_defaults=False)


def _unbound_init(node: cst.ClassDef) -> cst.FunctionDef | None:
    """The class's own `__init__` without `self`, whose parameters then line up with the
    arguments of a construction; None where it has none."""
    init = next((s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
    if init is None or not init.params.params or init.params.posonly_params:
        return None
    return init.with_changes(params=init.params.with_changes(params=init.params.params[1:]))


def _constructor_switched_off(module: ModuleModel, node: cst.ClassDef, followed: list[cst.CSTNode],
                              calls: list[_Scoped]) -> list[cst.If]:
    """The branches of a layer class's `__init__` that every construction the followed code
    makes leaves off, as for a builder function (`_switched_off`): `if norm == "bn":
    self.norm = nn.BatchNorm2d(c)` in `def __init__(self, c, norm="none")` where every
    `ConvBlock(...)` gives `norm` no value or another string. Only where the followed code names
    the class in nothing but direct calls: a subclass, `partial(ConvBlock, norm="bn")` or
    `block = ConvBlock` may construct it otherwise."""
    name = node.name.value
    init = _unbound_init(node)
    if init is None:
        return []
    callers = [c for c in calls if isinstance(c[0].func, cst.Name) and c[0].func.value == name]
    pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    named = sum(len(pattern.findall(code_only(module.code(n)))) for n in followed if n is not node)
    if not callers or named != len(callers):
        return []
    return _switched_off(init, callers, outer_defaults=False)


@functools.lru_cache(maxsize=8)
def _switched_off_branches(module: ModuleModel) -> list[cst.If]:
    """The branches of the module's top-level functions behind a switch every call of the
    function in the module leaves off (see `_switched_off`)."""
    calls = _scoped_calls_of(module)
    out: list[cst.If] = []
    for stmt in module.tree.body:
        if isinstance(stmt, cst.FunctionDef):
            name = stmt.name.value
            out += _switched_off(stmt, [c for c in calls if isinstance(c[0].func, cst.Name) and c[0].func.value == name])
    return out


# A call and the function it is written in (None at module level).
_Scoped = tuple[cst.Call, cst.FunctionDef | None]


def _scoped_calls_of(module: ModuleModel) -> list[_Scoped]:
    """`_scoped_calls` of a whole module, from the model's index of its calls (no second visit
    of the tree)."""
    found: list[_Scoped] = []
    for site in module.calls:
        scope: Scope | None = site.scope
        while scope is not None and scope.kind != "function":
            scope = scope.parent
        node = scope.node if scope is not None else None
        found.append((site.node, node if isinstance(node, cst.FunctionDef) else None))
    return found


@functools.lru_cache(maxsize=64)
def _calls_by_top_level(module: ModuleModel) -> tuple[dict[int, list[_Scoped]], list[_Scoped]]:
    """`_scoped_calls_of(module)` split by where they are written: in each top-level function or
    class (by the definition's id), and in the rest of the module's code."""
    tops = {id(stmt) for stmt in module.tree.body if isinstance(stmt, (cst.FunctionDef, cst.ClassDef))}
    by_definition: dict[int, list[_Scoped]] = {}
    elsewhere: list[_Scoped] = []
    for site, scoped in zip(module.calls, _scoped_calls_of(module)):
        scope: Scope = site.scope
        while scope.parent is not None and scope.parent.parent is not None:
            scope = scope.parent
        key = id(scope.node)
        if scope.parent is not None and key in tops:
            by_definition.setdefault(key, []).append(scoped)
        else:
            elsewhere.append(scoped)
    return by_definition, elsewhere


def _scoped_calls(node: cst.CSTNode) -> list[_Scoped]:
    """The calls in `node`, each with the innermost function it is written in."""
    found: list[_Scoped] = []
    scopes: list[cst.FunctionDef] = []

    class _Calls(cst.CSTVisitor):
        def visit_FunctionDef(self, function: cst.FunctionDef) -> None:
            scopes.append(function)

        def leave_FunctionDef(self, original: cst.FunctionDef) -> None:
            scopes.pop()

        def visit_Call(self, call: cst.Call) -> None:
            found.append((call, scopes[-1] if scopes else None))

    node.visit(_Calls())
    return found


def _switched_off(function: cst.FunctionDef, calls: list[_Scoped], outer_defaults: bool = True) -> list[cst.If]:
    """The `if flag:` blocks of `function` (`if flag == True:`; their `else` stays) testing a parameter whose default is
    False or None, where every one of `calls` (at least one) leaves it at that default or
    passes False/None; and the blocks that test a parameter against strings (`if norm ==
    "batch":`, `elif norm.lower() in ("bn", "batch"):`) where every call gives it another string:
    a literal, the parameter's default, or a parameter of the function the call is written in
    that its body does not rebind, by that parameter's default (`get_norm(ch, norm)` in `def
    __init__(self, ch, norm="instance")`; not with `outer_defaults` off). A call passing
    `*args`/`**kwargs` may give anything."""
    if not calls or any(a.star for c, _ in calls for a in c.args):
        return []
    ordered = [*function.params.posonly_params, *function.params.params]
    off: list[cst.If] = []
    for stmt in _statements(function.body):
        if not isinstance(stmt, cst.If):
            continue
        selector = _selector_tested(stmt.test)
        name = _flag_tested(stmt.test) if selector is None else selector[0]
        if name is None:
            continue
        index = next((i for i, p in enumerate(ordered) if p.name.value == name), None)
        default = ordered[index].default if index is not None else None
        if index is None or _rebinds(function, name):
            continue  # (`batch_norm = cfg.bn` in the body: the default is not what is tested)
        if selector is not None:
            if all(_selects_other(c, scope if outer_defaults else None, name, index, default, selector[1], selector[2])
                   for c, scope in calls):
                off.append(stmt)
            continue
        if default is None or not (is_false(default) or _is_none(default)):
            continue
        if all(_leaves_off(c, name, index) for c, _ in calls):
            off.append(stmt)
    return off


def _selector_tested(test: cst.BaseExpression) -> tuple[str, frozenset[str], bool] | None:
    """The parameter an `if` compares with strings, the strings that take its block, and
    whether the comparison ignores case: `if norm == "batch":`, `if norm.lower() == "bn":`,
    `if norm in ("bn", "batch"):`."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    left, target = test.left, test.comparisons[0]
    folded = False
    if isinstance(left, cst.Call) and not left.args and isinstance(left.func, cst.Attribute) \
            and left.func.attr.value in ("lower", "upper", "casefold"):
        left, folded = left.func.value, True
    if not isinstance(left, cst.Name):
        return None
    if isinstance(target.operator, cst.Equal):
        options: list[cst.BaseExpression] = [target.comparator]
    elif isinstance(target.operator, cst.In) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
        options = [e.value for e in target.comparator.elements]
    else:
        return None
    texts = [_literal(o) for o in options]
    if not texts or any(t is None for t in texts):
        return None
    return left.value, frozenset(t.lower() if folded else t for t in texts if t is not None), folded


def _literal(expr: cst.BaseExpression | None) -> str | None:
    """The text of a plain string literal (not an f-string)."""
    return string_text(expr) if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)) else None


def _selects_other(call: cst.Call, scope: cst.FunctionDef | None, name: str, index: int,
                   default: cst.BaseExpression | None, taken: frozenset[str], folded: bool) -> bool:
    """Whether `call` surely gives parameter `name` a value other than the strings in `taken`
    (see `_switched_off`); None counts as another value."""
    positional = [a for a in call.args if a.keyword is None]
    given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
    if given is None and index < len(positional):
        given = positional[index].value
    if given is None:
        given = default
    if isinstance(given, cst.Name) and given.value != "None":
        if scope is None or _assigns(scope, given.value):
            return False
        params = [*scope.params.posonly_params, *scope.params.params, *scope.params.kwonly_params]
        outer = next((p for p in params if p.name.value == given.value), None)
        given = outer.default if outer is not None else None
    if given is None:
        return False
    if _is_none(given):
        return True
    text = _literal(given)
    if text is None:
        return False
    return (text.lower() if folded else text) not in taken


def _flag_tested(test: cst.BaseExpression) -> str | None:
    """The name an `if` tests for truth, so that a False or None value skips its block:
    `if flag:`, `if flag == True:`, `if flag is True:`."""
    if isinstance(test, cst.Name):
        return test.value
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.operator, (cst.Equal, cst.Is)) and isinstance(target.comparator, cst.Name) \
                and target.comparator.value == "True":
            return test.left.value
    return None


def _rebinds(function: cst.FunctionDef, name: str) -> bool:
    """The body gives `name` another value (`batch_norm = cfg.bn`, `a, batch_norm = ...`,
    `batch_norm |= x`); a keyword argument of that name (`f(batch_norm=True)`) also counts."""
    code = code_only(cst.Module(body=[]).code_for_node(function.body))  # not the docstring's `norm => act`
    return bool(re.search(rf"(?<![\w.]){re.escape(name)}\s*(?:[-+*/|&]|:[^=\n]*)?=(?![=>])", code)
                or re.search(rf"(?<![\w.]){re.escape(name)}\s*(?:,[^=\n]*)?=(?![=>])", code))


def _assigns(function: cst.FunctionDef, name: str) -> bool:
    """Whether a statement of `function` binds `name` (`=`, `+=`, `for`, `with ... as`, `:=`,
    `global`); unlike `_rebinds`, a keyword argument of that name (`f(norm=norm)`) does not."""
    found = False

    class _Targets(cst.CSTVisitor):
        def _check(self, target: cst.CSTNode | None) -> None:
            nonlocal found
            if target is not None and any(isinstance(n, cst.Name) and n.value == name for n in _names_in(target)):
                found = True

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self._check(node.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self._check(node.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self._check(node.target)

        def visit_For(self, node: cst.For) -> None:
            self._check(node.target)

        def visit_AsName(self, node: cst.AsName) -> None:
            self._check(node.name)

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            self._check(node.target)

        def visit_Global(self, node: cst.Global) -> None:
            self._check(cst.Tuple([cst.Element(n.name) for n in node.names]))

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            self._check(cst.Tuple([cst.Element(n.name) for n in node.names]))

    function.body.visit(_Targets())
    return found


def _names_in(target: cst.CSTNode) -> list[cst.CSTNode]:
    """The bare names a binding target binds (`a`, `a, (b, *c)`; not `self.a` or `a[0]`)."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _names_in(e.value)]
    if isinstance(target, cst.StarredElement):
        return _names_in(target.value)
    return []


def _statements(block: cst.BaseSuite) -> list[cst.CSTNode]:
    """The statements of a block and of the blocks nested in it (loops, `if`s, `with`s)."""
    out: list[cst.CSTNode] = []
    if not isinstance(block, cst.IndentedBlock):
        return out
    for stmt in block.body:
        out += _nested(stmt)
    return out


def _nested(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    """`stmt` and the statements of its blocks; an `elif` is an `if` of its own, with its `else`."""
    out = [stmt]
    for attr in ("body", "orelse"):
        inner = getattr(stmt, attr, None)
        if isinstance(inner, cst.BaseSuite):
            out += _statements(inner)
        elif isinstance(inner, cst.Else):
            out += _statements(inner.body)
        elif isinstance(inner, cst.If):
            out += _nested(inner)
    return out


def _leaves_off(call: cst.Call, name: str, index: int) -> bool:
    positional = [a for a in call.args if a.keyword is None]
    given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
    if given is None and index < len(positional):
        given = positional[index].value
    return given is None or is_false(given) or _is_none(given)


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


class _DropBranches(cst.CSTTransformer):
    """Replaces the body of each given `if` with `pass` (its `else` stays)."""

    def __init__(self, branches: list[cst.If]) -> None:
        super().__init__()
        self.ids = {id(b) for b in branches}

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        if id(original) in self.ids:
            return updated.with_changes(body=cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])]))
        return updated


def _unsynced_batchnorm(text: str) -> bool:
    """Code that builds torch's BatchNorm layers and no SyncBatchNorm layer of its own."""
    return bool(_BATCHNORM_TEXT.search(_without_rebound(text))) and not _SYNC_LAYER.search(text)


def _swaps_batchnorm(text: str) -> bool:
    """Code of a function that replaces BatchNorm layers with another norm layer: it tests a
    module for BatchNorm (`isinstance(m, nn.BatchNorm2d)`, `"BatchNorm" in name`) and builds
    GroupNorm, LayerNorm, InstanceNorm, a frozen BatchNorm or an identity, and no BatchNorm."""
    code = code_only(text)
    return bool(_BATCHNORM_TEST.search(code)) and bool(_REPLACEMENT.search(code)) and not _BUILDS.search(code)


def _converts(text: str) -> bool:
    """Code (not prose, not a flag's bare declaration) that converts to SyncBatchNorm or reads
    a sync-BN flag."""
    code = _IMPORT.sub("", _DECLARATION.sub("", code_only(text)))
    return bool(_CONVERSION.search(code))


def _builds_batchnorm(name: str | None) -> bool:
    if name is not None and name.startswith("timm:"):
        model = name[5:].split(".", 1)[0].lower()
        return model.startswith(api.TIMM_BATCHNORM_FAMILIES) and not model.startswith("resnetv2") \
            or (model.startswith("vgg") and model.endswith("_bn"))
    if name is not None and name.startswith("transformers."):
        # `ResNetForImageClassification(config)`, `.from_pretrained("microsoft/resnet-50")`.
        parts = name.split(".")
        return api.TRANSFORMERS_BATCHNORM_NETWORK.fullmatch(
            parts[-2] if parts[-1] == "from_pretrained" and len(parts) > 2 else parts[-1]) is not None
    return name is not None and (name in api.BATCHNORMS or name.startswith(api.BATCHNORM_MODEL_PREFIXES) or (
        name.startswith("torchvision.models.vgg") and name.endswith("_bn")))


def _norm_type(node: cst.BaseExpression) -> str | None:
    """The `type` of a norm config written as `dict(type="BN", ...)` or `{"type": "BN", ...}`."""
    if isinstance(node, cst.Call) and dotted(node.func) == "dict":
        found = argument(node, "type")
        return string_text(found) if found is not None else None
    if isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.DictElement) and string_text(element.key) == "type":
                return string_text(element.value)
    return None


def _without_rebound(text: str) -> str:
    """`text` without the bare uses of a `BatchNorm2d` name the module binds to another class
    (`from modules import InPlaceABNSync as BatchNorm2d`); `nn.BatchNorm2d` stays. Where the
    module builds another norm layer (`nn.InstanceNorm2d(64)`), class tests (`isinstance(m,
    nn.BatchNorm2d)` in a weight-init loop written for any network) go too: they name the layer
    without building it. (Alone, such a test is the module's only word on its layers, and it is
    kept.)"""
    if _OTHER_NORM_BUILT.search(text):
        text = _TYPE_TEST.sub("", text)
    names = {a or b for a, b in _REBOUND_BATCHNORM.findall(text)}
    for name in names:
        text = re.sub(rf"(?<![\w.]){name}\b", "", text)
    return text


def _string_parts(expr: cst.BaseExpression) -> list[str | None]:
    """The pieces of a string built with `+` or an f-string: the literal text of each, None for
    each value put in (`"models." + name + ".build"` → ["models.", None, ".build"])."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _string_parts(expr.left) + _string_parts(expr.right)
    if isinstance(expr, cst.FormattedString):
        return [part.value if isinstance(part, cst.FormattedStringText) else None for part in expr.parts]
    text = string_text(expr)
    return [text] if text is not None else [None]


def _binds(function: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether `call`'s arguments can bind `function`'s parameters: every parameter without a
    default is given, and no positional argument is left over (True when the call passes
    `*args`/`**kwargs`, which may give anything)."""
    if any(a.star for a in call.args):
        return True
    positional = sum(1 for a in call.args if a.keyword is None)
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    params = function.params
    ordered = [*params.posonly_params, *params.params]
    if positional > len(ordered) and not isinstance(params.star_arg, cst.Param):
        return False
    for index, param in enumerate(ordered):
        if param.default is None and index >= positional and param.name.value not in keywords:
            return False
    return all(p.default is not None or p.name.value in keywords for p in params.kwonly_params)
