from __future__ import annotations

import re
from typing import Callable, Iterator

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.ddp import wraps
from ddpcheck.lint.model.module import CallSite, ClassInfo, ModuleModel
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.model.syntax import children, dotted, is_true
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._classes import (
    class_closure,
    classes_of,
    dynamic_members,
    self_references,
)


class FindUnusedParametersUnneeded(Rule):
    """`find_unused_parameters=True` on a model whose forward uses every layer on every call: DDP searches the autograd graph every iteration for nothing.

    With the flag DDP traverses the autograd graph from the forward's output after every forward
    pass to mark parameters that will get no gradient. When every layer takes part in every
    forward, the search finds nothing and only costs time; torch 2.13 itself warns about it at
    run time ("find_unused_parameters=True was specified in DDP constructor, but did not find any
    unused parameters in the forward pass. This flag results in an extra traversal of the
    autograd graph every iteration, which can adversely affect performance.").

    ## Why it matters
    The traversal runs on the critical path of every step and grows with the size of the graph;
    it also delays the first bucket's all-reduce. `ddpcheck run` measures the share of step time
    on a real job. Off by default and informational: it is a cost, not a bug, and static analysis
    cannot see a loss that ignores part of the output.

    Reported at the flag (written at the call, or as the entry of a `kwargs` dict handed over as
    `**kwargs` in the same file) when the model class and every project class it builds are known, every
    layer they assign is read in their `forward`, each `forward` is straight-line code (no `if`,
    no early `return`, no `try`; `if self.bn is not None: x = self.bn(x)` for a layer built only
    in some configurations does not count as a branch, nor does an `if` that uses no layer,
    such as `if self.config.pooling: x = F.max_pool2d(x, 2)`, or one that only computes a torch
    loss when given labels, `if labels is not None: loss = nn.CrossEntropyLoss()(x, labels)`) and returns one value (not a tuple, list or dict, whose parts a
    loss might leave out), and nothing reaches members dynamically or changes `requires_grad`. A
    forward that keeps part of a library model member's output (`self.bert(ids)[0]`,
    `.last_hidden_state`) is not reported: the pooler of a pretrained transformer makes the
    output left out, so its parameters get no gradient and the flag is needed (torch.nn layers,
    such as an LSTM's `[0]`, use every parameter for each output). A torchvision classifier
    (`models.resnet50()`, VGG, DenseNet, MobileNet, EfficientNet, RegNet, ConvNeXt and the like)
    is reported too (also one of several chosen by option: `resnet50` or `resnet101`): its forward runs every layer; Inception and GoogLeNet, whose auxiliary
    heads add outputs in training, are not. So is a Hugging Face causal LM of a dense decoder
    family (`LlamaForCausalLM.from_pretrained(path)`; Mistral, Qwen2, Gemma, OPT, GPT-NeoX, GPT-2's
    `GPT2LMHeadModel`): every parameter is on the path to its logits; not an `AutoModelForCausalLM`,
    which may load a mixture of experts.

    ## How to fix
    Remove `find_unused_parameters=True`. If some iterations do skip layers, keep it, or use
    `static_graph=True` when the set of used layers never changes.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://pytorch.org/docs/stable/notes/ddp.html (internal design: the graph traversal)
    - https://github.com/speechbrain/speechbrain/pull/713 (the warning in a real training run)
    """

    code = "DDP027"
    name = "find-unused-parameters-unneeded"
    severity = Severity.INFO
    default_enabled = False
    MESSAGE = (
        "`find_unused_parameters=True` but `{cls}` uses every layer in every forward: DDP traverses "
        "the autograd graph each iteration for nothing; remove the flag"
    )

    VALID = [
        """
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
                self.early_exit = nn.Linear(8, 2)

            def forward(self, x, exit_early=False):
                if exit_early:
                    return self.early_exit(x)
                return self.body(x)

        model = DDP(Net(), find_unused_parameters=True)
        """,
    ]
    INVALID = [
        Invalid(
            """
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel as DDP

            class MLP(nn.Module):
                def __init__(self, dim, hidden, classes):
                    super().__init__()
                    self.fc1 = nn.Linear(dim, hidden)
                    self.act = nn.GELU()
                    self.fc2 = nn.Linear(hidden, classes)

                def forward(self, x):
                    return self.fc2(self.act(self.fc1(x)))

            model = DDP(MLP(784, 512, 10).to(rank), device_ids=[rank], find_unused_parameters=True)
            """,
            lines=(14,),
        ),
        Invalid(
            """
            import torch.nn as nn

            class LinearProbe(nn.Module):
                def __init__(self, dim, classes, use_bn=True):
                    super().__init__()
                    self.bn = None
                    self.pool = nn.AdaptiveAvgPool2d((1, 1))
                    if use_bn:
                        self.bn = nn.BatchNorm2d(dim)
                    self.linear = nn.Linear(dim, classes)

                def forward(self, x):
                    x = self.pool(x)
                    if self.bn is not None:
                        x = self.bn(x)
                    x = x.view(x.size(0), -1)
                    return self.linear(x)

            probe = LinearProbe(2048, 1000)
            probe = nn.SyncBatchNorm.convert_sync_batchnorm(probe)
            probe = nn.parallel.DistributedDataParallel(
                probe.cuda(),
                device_ids=[gpu],
                find_unused_parameters=True,
            )
            """,
            lines=(24,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        if "requires_grad" in model.root.source:
            return
        for wrap in wraps(model, model.root):
            site = wrap.site
            flag = self._flag(site)
            if flag is None or is_true(site.arg("static_graph")) or wrap.inner is None:
                continue
            inner = model.values.at_call(site, wrap.inner)
            library = self._library_classifier(inner)
            if library is not None and self._torch_layers_only(site, wrap.inner, replaced_only=any(n.endswith(_HF) for n in library.split(" / "))):
                self.report(flag, self.MESSAGE.format(cls=library))
                continue
            roots = classes_of(model, inner)
            if len(roots) != 1:
                continue
            closure = class_closure(model, roots)
            if closure and all(self._uses_everything(module, info) and not self._part_of_library_output(module, info)
                               for module, info in closure):
                self.report(flag, self.MESSAGE.format(cls=roots[0][1].qualname))

    def _flag(self, site: CallSite) -> cst.CSTNode | None:
        """The `True` given to `find_unused_parameters`: written at the call, or an entry of the
        `**kwargs` dict it is given (`kwargs = {"find_unused_parameters": True}; DDP(model,
        **kwargs)`) in this file. None when any value it may take is not the literal True."""
        direct = site.arg("find_unused_parameters")
        if direct is not None:
            return direct if is_true(direct) else None
        values = self.model.values.keyword(site, "find_unused_parameters")
        nodes = [v.node for v in values if v.module is self.model.root]
        if not values or len(nodes) != len(values) or not all(is_true(n) for n in nodes):
            return None
        first = nodes[0]
        return first if is_true(first) else None

    def _torch_layers_only(self, site: CallSite, inner: cst.BaseExpression, replaced_only: bool = False) -> bool:
        """Every member the script assigns on the wrapped model (`model.fc = nn.Linear(2048, 10)`)
        is a torch.nn layer: a head of the project's own could leave parameters unused. With
        `replaced_only` (a transformers model, whose forward calls only its own members) none may
        be assigned at all: a new `model.value_head = nn.Linear(...)` is never run by it."""
        name = dotted(inner)
        if name is None:
            return False
        for key, bindings in site.scope.assignments.items():
            if not key.startswith(name + "."):
                continue
            if replaced_only:
                return False
            for binding in bindings:
                value = getattr(binding, "value", binding)
                call = site.module.call_at(value) if isinstance(value, cst.Call) else None
                if call is None or not (self.model.api(call) or "").startswith("torch.nn."):
                    return False
        return True

    def _library_classifier(self, values: list[Value]) -> str | None:
        """The torchvision classifiers (`models.resnet50()`, or one of several chosen by option)
        the values are, when each is one whose forward runs every layer and returns one tensor;
        None otherwise. Inception and GoogLeNet
        are left out: their auxiliary heads return extra outputs in training."""
        names: set[str] = set()
        for value in values:
            call = value.call
            site = value.module.call_at(call) if call is not None else None
            name = self.model.api(site) if site is not None else None
            if name is not None and name.startswith("transformers."):
                # A Hugging Face causal LM of a dense decoder family, built or loaded
                # (`LlamaForCausalLM.from_pretrained(path)`): every parameter, the embeddings,
                # every decoder layer, the final norm and the LM head, is on the path to the
                # logits the loss is computed from. (An `AutoModelForCausalLM` may be a
                # mixture of experts, whose router leaves experts out: not judged.)
                parts = name.split(".")
                if parts[-1] in ("from_pretrained", "from_config", "_from_config"):
                    parts.pop()
                if not _DENSE_CAUSAL_LM.match(parts[-1]):
                    return None
                names.add(parts[-1])
                continue
            if name is None or not name.startswith("torchvision.models."):
                return None
            short = name.rsplit(".", 1)[1]
            if not _FULL_CLASSIFIER.match(short):
                return None
            names.add(short)
        # A depth chosen by option (`resnet50`, `resnet101`, `resnet152`): each runs every layer.
        return " / ".join(sorted(names)) if names else None

    def _uses_everything(self, module: ModuleModel, info: ClassInfo) -> bool:
        if dynamic_members(module, info) or "requires_grad" in module.source:
            return False
        forward_name = info.methods.get("forward")
        members = [n[5:] for n in info.scope.assignments if n.startswith("self.") and n.count(".") == 1]
        if forward_name is None:
            return not members  # a base class or a holder without layers of its own
        forward = module.functions[forward_name]
        layers = {attr for attr in members
                  if any(isinstance(getattr(v, "value", v), cst.Call)
                         for v in info.scope.assignments[f"self.{attr}"])}
        if not _straight_line(forward, layers, lambda call: self._torch_call(module, call)):
            return False
        for attr in members:
            if attr not in layers:
                continue  # a plain attribute (a size, a flag), not a layer
            if not any(method == "forward" for method, _ in self_references(module, info, attr)):
                return False
        return True


    def _torch_call(self, module: ModuleModel, call: cst.Call) -> bool:
        """A call of torch (`nn.CrossEntropyLoss()`, `torch.cat(...)`), or of a local name every
        binding of which is such a call (`loss_fct = nn.CrossEntropyLoss(); loss_fct(x, y)`): it
        reaches no layer of the model, so an `if` that makes it leaves every parameter's part in
        the graph as it was."""
        site = module.call_at(call)
        if site is None:
            return False
        if (self.model.api(site) or "").startswith("torch."):
            return True
        if not isinstance(call.func, cst.Name):
            return False
        bindings = site.scope.assignments.get(call.func.value, ())
        for binding in bindings:
            value = getattr(binding, "value", binding)
            made = module.call_at(value) if isinstance(value, cst.Call) else None
            if made is None or not (self.model.api(made) or "").startswith("torch."):
                return False
        return bool(bindings)

    def _part_of_library_output(self, module: ModuleModel, info: ClassInfo) -> bool:
        """`forward` keeps only part of what a library model member returns
        (`self.encoder(ids)[0]`, `self.bert(ids).last_hidden_state`): a pretrained transformer's
        pooler (or another head) makes the outputs left out, so its parameters get no gradient and
        the flag is needed. torch.nn layers (an LSTM's `[0]`) use every parameter for each output."""
        forward_name = info.methods.get("forward")
        if forward_name is None:
            return False
        model = self.model
        for node in _walk(module.functions[forward_name].body):
            if isinstance(node, cst.Subscript):
                inner: cst.BaseExpression = node.value
            elif isinstance(node, cst.Attribute):
                inner = node.value
            else:
                continue
            if not isinstance(inner, cst.Call):
                continue
            name = dotted(inner.func) if isinstance(inner.func, cst.Attribute) else None
            if name is None or not name.startswith("self.") or name.count(".") != 1:
                continue
            for value in info.scope.assignments.get(name, ()):
                value = getattr(value, "value", value)
                site = module.call_at(value) if isinstance(value, cst.Call) else None
                if site is None or site.target is not None and site.target.kind == "class":
                    continue  # a project class: its forward is checked itself
                if not (model.api(site) or "").startswith("torch.nn."):
                    return True
        return False


_FULL_CLASSIFIER = re.compile(
    r"(resnet(18|34|50|101|152)|resnext\d+_\d+x\d+d|wide_resnet(50|101)_2|vgg(11|13|16|19)(_bn)?|alexnet"
    r"|densenet(121|161|169|201)|mobilenet_v2|mobilenet_v3_(large|small)|efficientnet_b[0-7]"
    r"|efficientnet_v2_[sml]|regnet_[xy]_\d+(gf|mf)|shufflenet_v2_x\d_\d|squeezenet1_[01]"
    r"|mnasnet\d_\d+|convnext_(tiny|small|base|large))$"
)


_HF = ("ForCausalLM", "LMHeadModel")
# Dense decoder-only language models of transformers whose forward runs every layer and
# returns logits made by all of them (no mixture of experts, no auxiliary heads).
_DENSE_CAUSAL_LM = re.compile(r"((Llama|Mistral|Qwen2|Gemma|Gemma2|OPT|GPTNeoX)ForCausalLM|GPT2LMHeadModel)$")


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        yield current
        if not isinstance(current, (cst.FunctionDef, cst.Lambda)) or current is node:
            stack.extend(children(current))


def _straight_line(function: cst.FunctionDef, layers: set[str],
                   torch_call: Callable[[cst.Call], bool]) -> bool:
    body = function.body.body
    stack: list[cst.CSTNode] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.If) and _optional_layer(node):
            stack.extend(children(node.body))  # runs exactly when the layer exists
            continue
        if isinstance(node, cst.If) and _without_layers(node, layers, torch_call):
            continue  # `if pooling: x = F.max_pool2d(x, 2)`: the same layers run either way
        if isinstance(node, (cst.If, cst.IfExp, cst.Try, cst.While, cst.Break, cst.Continue, cst.Raise)):
            return False
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            continue
        stack.extend(children(node))
    returns = [n for n in _returns(function)]
    if len(returns) != 1 or returns[0].value is None:
        return False
    return not isinstance(returns[0].value, (cst.Tuple, cst.List, cst.Dict))


def _without_layers(node: cst.If, layers: set[str], torch_call: Callable[[cst.Call], bool]) -> bool:
    """An `if` whose arms touch no layer of `self` (nor `self` itself, nor a member of a
    member: only plain attributes such as `self.config.pooling` are read), call no
    function of the project (only torch's, or a local bound to one, such as a loss built
    in the arm) and leave the forward nowhere early: `F.max_pool2d` under a configuration
    flag, or `if labels is not None: loss = nn.CrossEntropyLoss()(x, labels)`, changes no
    parameter's part in the graph. Its test is evaluated either way."""
    arms: list[cst.CSTNode] = [node.body]
    if node.orelse is not None:
        arms.append(node.orelse)
    stack = arms
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Return, cst.Raise, cst.Break, cst.Continue, cst.Yield, cst.FunctionDef,
                                cst.Lambda, cst.Try, cst.While, cst.For)):
            return False
        if isinstance(current, cst.Attribute) and isinstance(current.value, cst.Name) \
                and current.value.value == "self":
            if current.attr.value in layers:
                return False
            continue  # a plain attribute: nothing below it is `self` alone
        if isinstance(current, cst.Name) and current.value == "self":
            return False
        if isinstance(current, cst.Call):
            name = dotted(current.func)
            if (name is None or not name.startswith(("F.", "torch.", "nn.functional."))) \
                    and not torch_call(current):
                return False
        stack.extend(children(current))
    return True


def _optional_layer(node: cst.If) -> bool:
    """`if self.bn is not None: x = self.bn(x)` (or `if self.bn:`) with no `else`: a layer that
    `__init__` builds only for some configurations is used whenever it exists, so the test is
    not a branch that can leave parameters without a gradient."""
    if node.orelse is not None:
        return False
    test = node.test
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if not (isinstance(target.operator, cst.IsNot) and isinstance(target.comparator, cst.Name)
                and target.comparator.value == "None"):
            return False
        test = test.left
    name = dotted(test) if isinstance(test, cst.Attribute) else None
    if name is None or not name.startswith("self.") or name.count(".") != 1:
        return False
    stack: list[cst.CSTNode] = [node.body]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Attribute) and dotted(current) == name:
            return True
        stack.extend(children(current))
    return False


def _returns(function: cst.FunctionDef) -> Iterator[cst.Return]:
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Return):
            yield node
        elif not isinstance(node, (cst.FunctionDef, cst.Lambda)):
            stack.extend(children(node))
