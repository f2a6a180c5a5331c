"""Whether a call runs the forward of a DistributedDataParallel model, which synchronises with
the other ranks: DDP's forward broadcasts the module's buffers from rank 0 (BatchNorm running
statistics, registered tensors), and with gradients on may rebuild its buckets. Read at the call
itself (`model(x)`), through an outside function that runs a forward of the module it is handed
(a model summary, a FLOP count), a function of the project handed the wrapper, a method of the
object that holds it, or a function reading a global wrapper. A network known to hold no
buffers (its class's code makes none) has nothing to broadcast under `torch.no_grad()`.
Shared by the rules that ask whether a call is a collective the other ranks must join."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import before, is_ddp
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ClassInfo, ModuleModel
from ddpcheck.lint.model.paths import is_no_grad
from ddpcheck.lint.model.project import locate, resolved_path
from ddpcheck.lint.model.syntax import argument, dotted, is_false
from ddpcheck.lint.model.values import Frame, Value, off_default_branch

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model


class DdpForwards:
    """What a rule asks about DDP forwards (mixed into the rules that ask it; reads `self.model`)."""

    model: Model
    # Only a forward known to broadcast each time counts: a network known to hold buffers, called
    # with gradients on (a rule for which an unknown network, or a no_grad forward, says nothing).
    known_only = False

    def forwards_ddp(self, site: CallSite) -> bool:
        """`site` runs the forward of a DDP model that synchronises with the other ranks: the
        wrapper called itself, a library function that runs it, a project function handed it, a
        method of the object that holds it (`self.evaluate()`, `trainer.infer(x)`)."""
        name = self.model.api(site)
        if name is not None and self._library_forwards_ddp(site, name):
            return True
        if name is not None and site.target is None:
            return False
        return self._is_ddp_model(site) or self._forwards_ddp_argument(site) or self._method_forwards_ddp(site)

    def _is_ddp_model(self, site: CallSite) -> bool:
        """`model(x)` where `model` holds the DDP wrapper — wrapped before this call when both
        are in one function (`summary(model(x))` before `model = DDP(model)` runs the plain
        module)."""
        func = site.node.func
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return False
        if self.known_only and is_no_grad(self.model, site.module, site.withs, site.scope.qualname):
            # DDP syncs buffers only while `require_forward_param_sync` holds, which a forward
            # with gradients off clears (`_post_forward`): of a run of such forwards, only the
            # first after a training one broadcasts.
            return False
        for value in self.model.values.at_call(site, func):
            if is_ddp(self.model, value) and before(value, site) and self._broadcasts(value, site):
                return True
        return False

    def _library_forwards_ddp(self, site: CallSite, name: str) -> bool:
        """`summary(model, (3, 224, 224))` of torchsummary, `profile(model, inputs=(x,))` of thop:
        an outside function that runs a forward of the module it is handed, here the DDP
        wrapper (see api.FORWARDS_MODULE)."""
        known = api.FORWARDS_MODULE.get(name)
        if known is None:
            return False
        (keyword, position), inputs = known
        if all(argument(site.node, k, p) is None for k, p in inputs):
            return False
        passed = argument(site.node, keyword, position)
        if passed is None:
            return False
        return any(is_ddp(self.model, v) and before(v, site) and self._broadcasts(v)
                   for v in self.model.values.at_call(site, passed))

    def _forwards_ddp_argument(self, site: CallSite) -> bool:
        """`evaluate(model, loader)` where `model` holds the DDP wrapper and the function of the
        project runs its forward (`model(x)`), itself or in a function it hands it to. The
        callee is read with this call's arguments, so a function that first unwraps what it is
        given (`if hasattr(model, "module"): model = model.module`) runs the plain module."""
        for callee, bound in self.model.graph.targets(site):
            for param in callee.params():
                passed = self.model.graph.argument_for(site, callee, param, bound)
                if not isinstance(passed, cst.BaseExpression):
                    continue
                if any(is_ddp(self.model, v) and before(v, site) and self._broadcasts(v)
                       for v in self.model.values.at_call(site, passed)):
                    if self._calls_ddp(Frame(callee, site, None, bound), param.name, 5):
                        return True
        return False

    def _method_forwards_ddp(self, site: CallSite, depth: int = 2) -> bool:
        """`self.evaluate()` where the method (or a method of the same object it calls) runs the
        DDP wrapper the object holds (`self.net(x)` with `self.net` set to the wrapper); with
        `known_only`, also a method of another object of the project (`model.infer(x)` of a model
        class whose `infer` calls `self.net_G(x)`), resolved by the call graph."""
        func = site.node.func
        if depth <= 0:
            return False
        if isinstance(func, cst.Name):
            return self._function_forwards_global_ddp(site, depth)
        if not isinstance(func, cst.Attribute):
            return False
        own = isinstance(func.value, cst.Name) and func.value.value == "self"
        if not own and not (self.known_only and isinstance(func.value, (cst.Name, cst.Attribute))):
            return False
        for callee, bound in self.model.graph.targets(site):
            if bound != "method":
                continue
            for call in callee.module.calls_in(callee.qualname):
                if call.scope.function is not callee.scope.function:
                    continue
                if self._is_ddp_model(call) or self._method_forwards_ddp(call, depth - 1):
                    return True
        return False

    def _function_forwards_global_ddp(self, site: CallSite, depth: int) -> bool:
        """`estimate_loss()` where the function of the project runs the DDP wrapper that its
        module's top-level code binds (`model = DDP(model)` at module level, `model(x)` in the
        function, which reads the global): the same forward as one written at the call. A name
        the function binds or is handed is its own (see `_forwards_ddp_argument`)."""
        for callee, bound in self.model.graph.targets(site):
            if bound != "":
                continue
            own = callee.scope.assignments
            for call in callee.module.calls_in(callee.qualname):
                if call.scope.function is not callee.scope.function:
                    continue
                func = call.node.func
                if isinstance(func, cst.Name) and func.value not in own and self._is_ddp_model(call) \
                        and self._known_buffers(call, func):
                    return True
                if isinstance(func, cst.Name) and self._method_forwards_ddp(call, depth - 1):
                    return True
        return False

    def _known_buffers(self, site: CallSite, func: cst.BaseExpression) -> bool:
        """The DDP wrapper `func` calls at `site` holds a network of the project known to make
        buffers (`torch.compile`d or not): read through a global, an unknown network stays
        silent."""
        for value in self.model.values.at_call(site, func):
            call = value.call
            inner = argument(call, "module", 0) if call is not None and is_ddp(self.model, value) else None
            if inner is None:
                continue
            todo = self.model.values.of(value.module, inner, value.scope, value.frame, at=value.at)
            for _ in range(2):
                compiled = []
                for part in todo:
                    instance = self.model.graph.instance_of(part)
                    if instance is not None and self._instance_buffers(part, instance, 2):
                        return True
                    made = part.call
                    if made is not None and self.model.api_of(part) == api.COMPILE:
                        given = argument(made, "model", 0)
                        if given is not None:
                            compiled += self.model.values.of(part.module, given, part.scope, part.frame, at=part.at)
                todo = compiled
        return False

    def _calls_ddp(self, frame: Frame, name: str, depth: int) -> bool:
        """Whether `frame`'s function calls the DDP wrapper it was handed as `name`."""
        function = frame.function
        values = self.model.values
        for call in function.module.calls_in(function.qualname):
            if self.model.paths.never(call, frame) is not None:
                continue  # a branch this call's arguments rule out (`if backend == "tf":`)
            if call.dotted == name:
                if any(is_ddp(self.model, v) for v in values.at_call(call, call.node.func, frame)):
                    return True
            elif depth > 0 and any(dotted(a.value) == name for a in call.node.args):
                for callee, bound in self.model.graph.targets(call):
                    for param in callee.params():
                        passed = self.model.graph.argument_for(call, callee, param, bound)
                        if not isinstance(passed, cst.BaseExpression) or dotted(passed) != name:
                            continue
                        if not any(is_ddp(self.model, v) for v in values.at_call(call, passed, frame)):
                            continue
                        if self._calls_ddp(Frame(callee, call, frame, bound), param.name, depth - 1):
                            return True
        return False

    def _broadcasts(self, wrap: Value, forward: CallSite | None = None) -> bool:
        """DDP's forward broadcasts the module's buffers from rank 0 (unless `broadcast_buffers=
        False`); a module of the project whose code holds no buffers (no norm layers with running
        statistics, no `register_buffer`) has none to send, nor, at a `forward` that runs under
        `torch.no_grad()`, a stack of torch's own layers that keep none (with gradients on, the
        forward may rebuild DDP's buckets, and a training forward's backward reduces gradients)."""
        call = wrap.call
        assert call is not None
        if is_false(argument(call, "broadcast_buffers", 4)):
            return False
        inner = argument(call, "module", 0)
        if inner is None:
            return not self.known_only
        # Only under no_grad: with gradients on, DDP's forward may rebuild its buckets, which
        # broadcasts from rank 0 (`_pre_forward`: `torch.is_grad_enabled() and
        # self.reducer._rebuild_buckets()`), buffers or not.
        layers = forward is not None and is_no_grad(self.model, forward.module, forward.withs, forward.scope.qualname)
        # A network built on a branch the command line's defaults do not take (`if "CNN" in
        # model_name:` with `--model_name` defaulting to "FNO") is not the one a run holds.
        return any(self._value_buffers(value, 2, layers)
                   for value in self.model.values.of(wrap.module, inner, wrap.scope, wrap.frame, at=wrap.at)
                   if not off_default_branch(value))

    def _value_buffers(self, value: Value, depth: int, layers: bool) -> bool:
        """Whether the module a value builds may hold buffers: a project network whose code makes
        some, torch's own layers that keep none (`nn.Linear`, `nn.ReLU`), or a container of them
        (`nn.Sequential(nn.Linear(8, 16), nn.ReLU())`, whose parts are each read). Anything else
        is an outside model whose buffers are unknown: it may hold some, or, with `known_only`,
        it counts only when its name says so (`torchvision.models.resnet50`)."""
        instance = self.model.graph.instance_of(value)
        if instance is not None:
            return self._instance_buffers(value, instance, 2)
        call = value.call
        name = self.model.api_of(value) if call is not None else None
        if call is not None and name == api.COMPILE and depth > 0:
            # `torch.compile(model)`: the compiled wrapper holds the module it is given, and its
            # buffers are that module's.
            inner = argument(call, "model", 0)
            parts = self.model.values.of(value.module, inner, value.scope, value.frame, at=value.at) \
                if inner is not None else []
            return not parts and not self.known_only or any(self._value_buffers(part, depth - 1, layers)
                                                            for part in parts)
        if call is None or name is None:
            return not self.known_only
        if self.known_only and name != "torch.nn.Sequential":
            return _BUFFERS.search(name) is not None
        if not layers and not self.known_only:
            return True
        if name in _BUFFERLESS_LAYERS:
            return False
        if name != "torch.nn.Sequential" or depth <= 0 or not call.args:
            return not self.known_only
        for arg in call.args:
            parts = [] if arg.star else self.model.values.of(value.module, arg.value, value.scope, value.frame,
                                                             at=value.at)
            if not parts and not self.known_only or any(self._value_buffers(part, depth - 1, layers)
                                                        for part in parts):
                return True
        return False

    def _instance_buffers(self, value: Value, instance: tuple[ModuleModel, ClassInfo], depth: int) -> bool:
        """Whether an instance of a project class may hold buffers: its class's code (and its
        project bases, and the modules its module imports) makes some, or a submodule handed to
        its constructor does (`Render(encoder=PositionalEncoding(n), sampler=PointSampler(...))`,
        whose parts register buffers that the assembling class's own code never names)."""
        if any(_holds_buffers(_class_source(module, info)) for module, info in self.model.graph.mro(*instance)) \
                or self._imports_buffers(instance[0]):
            return True
        call = value.call
        if call is None or depth <= 0:
            return False
        for arg in call.args:
            for part in self.model.values.of(value.module, arg.value, value.scope, value.frame, at=value.at):
                # Only a part known to be a project network with buffers counts: a value the
                # model cannot read (a number, an option, an outside object) says nothing, nor
                # does a configuration object whose module happens to import a network.
                if not self.model.graph.is_network(part):
                    continue
                inner = self.model.graph.instance_of(part)
                if inner is not None and self._instance_buffers(part, inner, depth - 1):
                    return True
        return False

    def _imports_buffers(self, module: ModuleModel) -> bool:
        """A project module the model's module imports holds buffer-making code."""
        path = resolved_path(module.path)
        if path is None:
            return True
        for origin in set(module.names.aliases.values()) | set(module.names.stars):
            where = locate(path, origin)
            if where is not None:
                text = self.model.project.text(where[0])
                if text is None or _holds_buffers(text):
                    return True
        return False


# Layers and calls that give a module buffers (running statistics, registered tensors). Of
# torchvision only its networks count (`torchvision.models`, `from torchvision import models`), not
# a module that uses its transforms or image helpers. InstanceNorm keeps running statistics only
# when asked to (`track_running_stats=True`; its default registers them as None, which DDP does
# not broadcast). Named networks count by their numbered names (`resnet50`), not by words
# such as `resnet_block` that a project's own layers are called.
_BUFFERS = re.compile(r"register_buffer|BatchNorm|track_running_stats\s*=\s*True|running_mean|Buffer\("
                      r"|torchvision\.models"
                      r"|from\s+torchvision\s+import[^\n]*\bmodels\b|\btimm\b|\bres_?net\d|\bresnext\d|efficientnet|densenet"
                      r"|mobilenet|_bn\b")

# timm's small helpers, which hold no buffers: importing them (`from timm.models.layers import
# DropPath, trunc_normal_`, as vision transformers do) says nothing about a network's buffers.
_TIMM_HELPERS = re.compile(
    r"^[ \t]*from[ \t]+timm(?:\.models)?\.layers[ \t]+import[ \t]+"
    r"(?:(?:DropPath|drop_path|trunc_normal_|to_2tuple|to_ntuple|lecun_normal_|Mlp)[ \t]*,?[ \t]*)+$",
    re.M,
)


# torch's layers that register no buffer: DDP's forward has nothing of theirs to broadcast.
_BUFFERLESS_LAYERS = frozenset(f"torch.nn.{name}" for name in (
    "Linear", "Bilinear", "Identity", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish",
    "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Softplus", "Hardtanh", "Hardswish", "Hardsigmoid",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Flatten", "Unflatten",
    "LayerNorm", "GroupNorm", "Embedding", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "Upsample", "PixelShuffle", "LSTM", "GRU", "RNN",
))


def _class_source(module: ModuleModel, info: ClassInfo) -> str:
    """The code of `module` that can make up an instance of the class `info`: the module less the
    other classes it defines that the class does not name, directly or through a class it names
    (a model file with a BatchNorm head class beside a LayerNorm encoder: the encoder's code has
    no buffers)."""
    code = {name: module.code(c.node) for name, c in module.classes.items() if "." not in name}
    named = {info.qualname.split(".")[0]}
    todo = list(named)
    while todo:
        text = code.get(todo.pop(), "")
        for other in code:
            if other not in named and re.search(rf"\b{re.escape(other)}\b", text):
                named.add(other)
                todo.append(other)
    source = module.source
    for name, text in code.items():
        if name not in named:
            source = source.replace(text, "", 1)
    return source


# timm's vision transformer (`timm.create_model("vit_small_patch16_224")`, `deit_…`, `from
# timm.models.vision_transformer import VisionTransformer`): LayerNorm, parameters and no
# registered buffer, so nothing for DDP to broadcast.
_TIMM_VIT = re.compile(r"""\btimm\.create_model\(\s*['"](?:vit|deit)_[\w.]*['"](?:[^()]|\([^()]*\))*\)"""
                       r"|^[ \t]*from[ \t]+timm\.models\.vision_transformer[ \t]+import[^\n]*$", re.M)
_IMPORT_TIMM = re.compile(r"^[ \t]*import[ \t]+timm[ \t]*$", re.M)


# `self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")`: true on every
# PyTorch since 2.0, where the fused attention needs no causal-mask buffer.
_FUSED_ATTENTION_FLAG = re.compile(
    r"""\bself\.(\w+)\s*=\s*hasattr\(\s*(?:torch\.nn\.functional|F)\s*,\s*['"]scaled_dot_product_attention['"]\s*\)""")


def _without_fallback_buffers(code: str) -> str:
    """`code` less the blocks under `if not self.flash:` where `self.flash` says whether PyTorch
    has its fused attention (`hasattr(F, "scaled_dot_product_attention")`, PyTorch 2.0 on): the
    causal-mask buffer registered there only for older versions is never made."""
    flags = set(_FUSED_ATTENTION_FLAG.findall(code))
    if not flags:
        return code
    opening = re.compile(rf"^([ \t]*)if[ \t]+not[ \t]+self\.(?:{'|'.join(map(re.escape, flags))})[ \t]*:[ \t]*$")
    out: list[str] = []
    skipping: int | None = None  # the indent of the `if` whose block is left out
    for line in code.split("\n"):
        if skipping is not None:
            if not line.strip() or len(line) - len(line.lstrip()) > skipping:
                continue
            skipping = None
        found = opening.match(line)
        if found:
            skipping = len(found.group(1).expandtabs())
            continue
        out.append(line)
    return "\n".join(out)


def _holds_buffers(source: str) -> bool:
    """Whether a module's code may give a network buffers (see `_BUFFERS`)."""
    code = _TIMM_HELPERS.sub("", _without_fallback_buffers(code_only(source)))
    vits = _TIMM_VIT.sub("", code)
    if vits != code and not re.search(r"\btimm\.", vits):
        code = _IMPORT_TIMM.sub("", vits)
    return _BUFFERS.search(code) is not None
