"""What several rules ask about the project classes a value is an instance of: the class itself,
the project classes its methods construct (a model's blocks), and their methods' calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from ddpcheck.lint.model.module import CallSite, ClassInfo, ModuleModel
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import children, subexpressions
from ddpcheck.lint.model.values import Value

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

MAX_CLASSES = 24  # a bound: past it the answer is "unknown" for the classes not reached


def classes_of(model: Model, values: list[Value]) -> list[tuple[ModuleModel, ClassInfo]]:
    """The project classes the values are instances of (each once)."""
    out: list[tuple[ModuleModel, ClassInfo]] = []
    for value in values:
        found = model.graph.instance_of(value)
        if found is not None and all(found[1] is not c for _, c in out):
            out.append(found)
    return out


def class_closure(model: Model, roots: list[tuple[ModuleModel, ClassInfo]]) -> list[tuple[ModuleModel, ClassInfo]]:
    """`roots`, their project bases, and the project classes their methods construct, breadth
    first (`self.blocks = nn.ModuleList([Block(...) for _ in range(n)])` reaches Block)."""
    out: list[tuple[ModuleModel, ClassInfo]] = []
    todo = list(roots)
    while todo and len(out) < MAX_CLASSES:
        module, info = todo.pop(0)
        for owner_module, owner in model.graph.mro(module, info):
            if any(owner is c for _, c in out):
                continue
            out.append((owner_module, owner))
            for site in method_calls(model, owner_module, owner):
                target = site.target
                if target is not None and target.kind == "class":
                    made = model.graph.class_at(target)
                    if made is not None:
                        todo.append(made)
    return out


def method_calls(model: Model, module: ModuleModel, info: ClassInfo) -> Iterator[CallSite]:
    """The calls made directly in the methods of one class (nested functions included)."""
    owners = tuple(info.methods.values())
    for site in module.calls:
        where = site.scope.qualname
        if any(where == q or where.startswith(q + ".") for q in owners):
            yield site


def methods(module: ModuleModel, info: ClassInfo) -> list[Function]:
    return [Function(module, q) for q in info.methods.values()]


# Layers that own parameters (`nn.ReLU`, `nn.Dropout`, pooling and the like own none).
_PARAMETER_LAYERS = frozenset(
    "torch.nn." + n for n in (
        "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm",
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d",
        "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell",
        "RNNCell", "MultiheadAttention", "PReLU", "Transformer", "TransformerEncoder",
        "TransformerDecoder", "TransformerEncoderLayer", "TransformerDecoderLayer", "Parameter",
    )
)


def parameter_submodules(model: Model, module: ModuleModel, info: ClassInfo) -> list[tuple[str, cst.Call]]:
    """`self.x = nn.Linear(...)` (a layer that owns parameters, or `nn.Parameter`) in a method of
    the class: (`x`, the construction)."""
    out: list[tuple[str, cst.Call]] = []
    for name, values in info.scope.assignments.items():
        if not name.startswith("self.") or name.count(".") != 1:
            continue
        for value in values:
            node = getattr(value, "value", value)
            if not isinstance(node, cst.Call):
                continue
            site = module.call_at(node)
            if site is not None and model.api(site) in _PARAMETER_LAYERS:
                out.append((name[5:], node))
                break
    return out


def self_references(module: ModuleModel, info: ClassInfo, attribute: str) -> list[tuple[str, cst.Attribute]]:
    """Every `self.<attribute>` read in the class's methods: (the method's name, the node).
    Assignment targets are not reads."""
    out: list[tuple[str, cst.Attribute]] = []
    for method, qualname in info.methods.items():
        function = module.functions.get(qualname)
        if function is None:
            continue
        targets = _assigned_nodes(function)
        for node in _attributes(function):
            if node.attr.value == attribute and isinstance(node.value, cst.Name) and node.value.value == "self" \
                    and id(node) not in targets:
                out.append((method, node))
    return out


def dynamic_members(module: ModuleModel, info: ClassInfo) -> bool:
    """The class reaches its members in ways the names do not show: getattr/setattr on self,
    `self.children()`/`modules()`/`_modules`, `__dict__`, `named_children`."""
    text = module.code(info.node)
    return any(word in text for word in ("getattr(self", "setattr(self", "self.children(", "self.modules(",
                                         "self._modules", "self.__dict__", "self.named_children(",
                                         "self.named_modules(", "self.parameters(", "self.named_parameters("))


def _attributes(node: cst.CSTNode) -> Iterator[cst.Attribute]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Attribute):
            yield current
        stack.extend(children(current))


def _assigned_nodes(function: cst.FunctionDef) -> set[int]:
    out: set[int] = set()
    for node in subexpressions(function):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                out.add(id(target.target))
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            out.add(id(node.target))
    return out
