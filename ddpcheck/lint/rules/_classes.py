"""What several rules ask about the project classes a value is an instance of: the class itself,
the project classes its methods construct (a model's blocks), and their methods' calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite, ClassInfo, ModuleModel
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.values import Value

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

MAX_CLASSES = 24  # a bound: past it the answer is "unknown" for the classes not reached


def classes_of(model: Model, values: list[Value], depth: int = 3) -> list[tuple[ModuleModel, ClassInfo]]:
    """The project classes the values are instances of (each once), also through
    `SyncBatchNorm.convert_sync_batchnorm(module)`, which returns the module it is given."""
    out: list[tuple[ModuleModel, ClassInfo]] = []
    for value in values:
        call = value.call
        site = value.module.call_at(call) if call is not None else None
        if depth > 0 and site is not None and model.api(site) == api.CONVERT_SYNC_BATCHNORM:
            given = site.arg("module", 0)
            inner = model.values.at_call(site, given) if given is not None else []
            found_all = classes_of(model, inner, depth - 1)
        else:
            found = model.graph.instance_of(value)
            found_all = [found] if found is not None else []
        for found in found_all:
            if all(found[1] is not c for _, c in out):
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


def method_scopes(module: ModuleModel, info: ClassInfo) -> list[tuple[str, str]]:
    """(method name, qualified name) of the class's methods and of the functions nested in them
    (those under the method that holds them)."""
    memo: dict[int, list[tuple[str, str]]] = module.memo.setdefault("method_scopes", {})
    found = memo.get(id(info))
    if found is None:
        found = [(name, q) for name, owner in info.methods.items() for q in module.function_scopes
                 if q == owner or q.startswith(owner + ".")]
        memo[id(info)] = found
    return found


def method_calls(model: Model, module: ModuleModel, info: ClassInfo) -> Iterator[CallSite]:
    """The calls made directly in the methods of one class (nested functions included)."""
    for _, qualname in method_scopes(module, info):
        yield from module.calls_in(qualname)


def reached_calls(model: Model, module: ModuleModel, info: ClassInfo, depth: int = 2
                  ) -> Iterator[tuple[ModuleModel, CallSite]]:
    """The calls of the class's methods (`method_calls`) and those of the plain project functions
    they call, `depth` calls down (`def checkpoint_wrapper(use, fn, *a): return checkpoint(fn, *a)`
    called from `forward`): (the module the call is in, the call). Methods of other classes are
    not followed (`class_closure` reaches the classes the model builds)."""
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[ModuleModel, list[str], int]] = [(module, [q for _, q in method_scopes(module, info)], depth)]
    while todo:
        where, scopes, left = todo.pop(0)
        for qualname in scopes:
            for site in where.calls_in(qualname):
                yield where, site
                if left <= 0:
                    continue
                for function, _ in model.graph.targets(site):
                    key = (str(function.module.path), function.qualname)
                    if function.owner is not None or key in seen:
                        continue
                    seen.add(key)
                    nested = [q for q in function.module.function_scopes
                              if q == function.qualname or q.startswith(function.qualname + ".")]
                    todo.append((function.module, nested, left - 1))


def methods(module: ModuleModel, info: ClassInfo) -> list[Function]:
    return [Function(module, q) for q in info.methods.values()]


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
            if site is not None and api.owns_parameters(model.api(site) or ""):
                out.append((name[5:], node))
                break
    return out


def self_references(module: ModuleModel, info: ClassInfo, attribute: str) -> list[tuple[str, cst.Attribute]]:
    """Every `self.<attribute>` read in the class's methods (and functions nested in them):
    (the method's name, the node). Assignment targets are not reads."""
    out: list[tuple[str, cst.Attribute]] = []
    for method, qualname in method_scopes(module, info):
        for node in module.self_reads.get(qualname, {}).get(attribute, ()):
            out.append((method, node))
    return out


# Ways a module reaches its members without naming them.
_DYNAMIC_CALLS = frozenset({"getattr", "setattr"})
_DYNAMIC_METHODS = frozenset({"children", "modules", "named_children", "named_modules", "parameters",
                              "named_parameters"})
_DYNAMIC_ATTRIBUTES = ("_modules", "__dict__")


def dynamic_members(module: ModuleModel, info: ClassInfo) -> bool:
    """The class reaches its members in ways the names do not show: getattr/setattr on self,
    `self.children()`/`modules()`/`parameters()` and their named forms, `self._modules`,
    `self.__dict__`."""
    for _, qualname in method_scopes(module, info):
        reads = module.self_reads.get(qualname, {})
        if any(a in reads for a in _DYNAMIC_ATTRIBUTES):
            return True
    for site in (s for _, q in method_scopes(module, info) for s in module.calls_in(q)):
        if site.method in _DYNAMIC_METHODS and site.receiver_name == "self":
            return True
        if site.dotted in _DYNAMIC_CALLS and site.node.args and \
                isinstance(site.node.args[0].value, cst.Name) and site.node.args[0].value.value == "self":
            return True
    return False
