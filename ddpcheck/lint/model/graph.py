"""The call graph across the project's modules: which functions a call may run.

Followed: plain calls of project functions (imported, re-exported, star-imported, nested),
`self.m()` and `cls.m()` through the class and its project bases, `super().m()`, `obj.m()` where
the model knows obj's class (`logger = MetricLogger()`, `self.scaler = NativeScaler()`, a
parameter every caller passes an instance to), constructors (→ `__init__`), constructors of a
class chosen at run time (`Exp = ForecastExp` on one branch and `ImputeExp` on another, then
`Exp(args)`; `BACKENDS[name](args)` over a dict of classes, `tasks.__dict__[name]()` over a
project package that holds only classes: each class it may be, and the methods of each on the
instance), calls of instances (→ `__call__`), and, for a method name defined by exactly one class of the module and the project
modules it imports, `x.m()` on an object of unknown class. Properties are followed by the value
flow (values.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.imported_code import code_reached, module_attributes_used
from ddpcheck.lint.model.module import Binding, CallSite, ClassInfo, ModuleModel, Param, Point, Scope, Target
from ddpcheck.lint.model.options import option_choices
from ddpcheck.lint.model.project import Project, locate, resolved_path
from ddpcheck.lint.model.resolve import Resolver
from ddpcheck.lint.model.symbols import Function, decorator_names
from ddpcheck.lint.model.syntax import annotation_name, argument, dotted, has_star_kwargs, string_text

from ddpcheck.lint.model.values import Frame, Value, Values


class GraphModel(Protocol):
    """What the call graph asks of the semantic model (semantic.Model). The execution paths sit
    above this module (they follow the graph), so the reach they record is asked of the model."""

    @property
    def root(self) -> ModuleModel: ...
    @property
    def project(self) -> Project: ...
    @property
    def resolver(self) -> Resolver: ...
    @property
    def values(self) -> Values: ...
    @property
    def reach_complete(self) -> bool: ...
    def project_model(self, path: Path) -> ModuleModel | None: ...
    def resolve_in(self, path: Path, name: str) -> Target | None: ...
    def edges_into(self, function: Function) -> list[tuple[CallSite, str]]: ...
    def api(self, site: CallSite) -> str | None: ...
    def imported_modules(self, module: ModuleModel) -> list[ModuleModel]: ...


_METHOD_DEF = re.compile(r"^[ \t]+def[ \t]+(\w+)[ \t]*\(", re.MULTILINE)
Callee = tuple[Function, str]


@dataclass(frozen=True, eq=False, repr=False)
class BaseInit:
    """The call that runs a torch class's constructor for an instance: `call` (the instance's
    own constructor call, or the subclass's `super().__init__(...)`), the frame its arguments
    are read in, how many leading arguments are `self` (1 for `Base.__init__(self, ...)`), and
    the subclass constructor it sits in (None when the call is the instance's own)."""

    call: CallSite
    frame: Frame | None
    shift: int
    init: Function | None  # the function and how it is bound: "", "method", "instance", "constructor"
    # Positional arguments that reach torch's parameters at the same places (an outside
    # library's subclass shares only its leading ones); None: all of them.
    positional: int | None = None


_MAX_MRO = 8
# Lookups of callees in progress at once: each may read values that ask for other calls' callees
# (a parameter's callers, a variable holding one of many functions); a chain longer than this
# is unknown rather than deeper than Python's stack (sixty `if kind == ...: return fn` branches
# each calling a parameter).
_MAX_NESTED_LOOKUPS = 24
# Method names too common to pin on one class by name alone.
_COMMON = frozenset({
    "__init__", "__call__", "forward", "update", "step", "reset", "save", "load", "log", "get", "set",
    "run", "train", "eval", "to", "cuda", "item", "append", "add", "clear", "close", "write", "read",
    "state_dict", "load_state_dict", "zero_grad", "backward", "keys", "values", "items", "copy",
    "start", "stop", "info", "debug", "warning", "error", "print", "format", "build", "setup",
    "sample", "apply", "parameters", "named_parameters", "modules", "children", "predict", "test",
    "validate", "main", "next", "send", "join", "put", "pop", "extend", "insert", "remove", "sort",
    "mean", "sum", "max", "min", "view", "reshape", "size", "numel", "float", "half", "cpu", "detach",
    "clone", "init", "initialize", "compute", "process", "encode", "decode", "generate", "fit",
})


class CallGraph:
    def __init__(self, model: GraphModel) -> None:
        self.model = model
        self._targets: dict[int, list[Callee]] = {}
        self._callers: dict[tuple[int, str], list[tuple[CallSite, str]]] = {}
        self._classes: dict[tuple[str, str], tuple[ModuleModel, ClassInfo] | None] = {}
        self._class_reads: dict[tuple[int, int, str], bool] = {}  # (module, class, attribute) -> not assigned by name
        self._in_progress: set[int] = set()
        # Set while a lookup rests on a parameter whose callers the reach has not all found yet
        # (see _held_functions): such an answer is not kept.
        self._provisional = False
        self._pending: dict[int, list[Callee]] = {}
        self._methods: dict[str, frozenset[str]] = {}
        self._passed_names: dict[tuple[int, str], dict[str, list[CallSite]]] = {}
        self._chosen: dict[int, list[tuple[ModuleModel, ClassInfo]]] = {}
        self._overrides: dict[tuple[int, str], list[Function]] = {}
        self._subclasses: dict[tuple[int, str], list[tuple[ModuleModel, ClassInfo]]] = {}
        self._script: list[tuple[ModuleModel, ClassInfo]] | None = None

    # --- classes -----------------------------------------------------------------------------
    def class_at(self, target: Target) -> tuple[ModuleModel, ClassInfo] | None:
        """The project class a Target of kind "class" names."""
        if target.path is None or target.kind != "class":
            return None
        key = (str(target.path), target.name)
        if key not in self._classes:
            module = self.model.project_model(target.path)
            info = module.classes.get(target.name) if module is not None else None
            self._classes[key] = (module, info) if module is not None and info is not None else None
        return self._classes[key]

    def bases(self, module: ModuleModel, info: ClassInfo) -> list[Target]:
        found = []
        for base in info.bases:
            name = dotted(base)
            if name is None:
                continue
            target = self.model.resolver.name(module, name, info.scope.parent)
            if target is not None:
                found.append(target)
        return found

    def mro(self, module: ModuleModel, info: ClassInfo) -> list[tuple[ModuleModel, ClassInfo]]:
        """The class and its project bases, depth first (enough for single inheritance chains)."""
        out: list[tuple[ModuleModel, ClassInfo]] = []
        todo = [(module, info)]
        while todo and len(out) < _MAX_MRO:
            current = todo.pop(0)
            if any(c[1] is current[1] for c in out):
                continue
            out.append(current)
            for base in self.bases(*current):
                found = self.class_at(base)
                if found is not None:
                    todo.append(found)
        return out

    def method(self, module: ModuleModel, info: ClassInfo, name: str, after: ClassInfo | None = None) -> Function | None:
        chain = self.mro(module, info)
        if after is not None:
            index = next((i for i, c in enumerate(chain) if c[1] is after), None)
            chain = chain[index + 1:] if index is not None else []
        for owner_module, owner in chain:
            qualname = owner.methods.get(name)
            if qualname is not None:
                return Function(owner_module, qualname)
        return None

    def methods(self, module: ModuleModel, info: ClassInfo, name: str) -> list[Function]:
        """What `obj.name(...)` may run on an instance of the class: the method the class (or a
        base) defines, and the functions its module sets on the class or a base with
        `setattr(Class, "name", function)` (a registry choosing the method at run time)."""
        out = []
        defined = self.method(module, info, name)
        if defined is not None:
            out.append(defined)
        for owner_module, owner in self.mro(module, info):
            for function in self._patched(owner_module).get((owner.qualname, name), ()):
                if function not in out:
                    out.append(function)
        return out

    def _patched(self, module: ModuleModel) -> dict[tuple[str, str], list[Function]]:
        """(class, attribute) → the functions `setattr(Class, "attribute", f)` sets in `module`."""
        found: dict[tuple[str, str], list[Function]] | None = module.memo.get("patched_methods")
        if found is not None:
            return found
        found = {}
        module.memo["patched_methods"] = found
        for site in module.calls:
            if site.dotted != "setattr" or len(site.node.args) != 3:
                continue
            owner, attr, value = (a.value for a in site.node.args)
            name = string_text(attr)
            cls = dotted(owner)
            if name is None or cls is None or cls not in module.classes:
                continue
            if site.scope.lookup(cls) and site.scope.owner_of(cls) is not module.module_scope:
                continue  # a local of that name, not the class
            found.setdefault((cls, name), []).extend(self.functions_in(site, value))
        return found

    def functions_in(self, site: CallSite, expr: cst.BaseExpression, constructors: bool = False) -> list[Function]:
        """The project functions an expression at `site` may hold (`fn` in `mp.spawn(fn, ...)`, the
        function a variable was set to); with `constructors`, a project class stands for its
        `__init__` (`mp.spawn(Trainer, ...)` builds a Trainer in every process)."""
        out: list[Function] = []
        for value in self.model.values.at_call(site, expr):
            node = value.node
            function = None
            if isinstance(node, cst.Name):
                for scope in value.scope.chain():
                    if scope.kind == "function" and f"{scope.qualname}.{node.value}" in value.module.functions:
                        function = Function(value.module, f"{scope.qualname}.{node.value}")
                        break
            if function is None and isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) \
                    and node.value.value in ("self", "cls"):
                # `mp.spawn(self._train, ...)` in a trainer class: the bound method (a base
                # class's when the class inherits it).
                owner = value.scope.class_scope
                info = value.module.classes.get(owner.qualname) if owner is not None else None
                if info is not None:
                    function = self.method(value.module, info, node.attr.value)
            elif function is None and isinstance(node, cst.Attribute):
                # `mp.spawn(trainer.train, ...)` after `trainer = Trainer(cfg)`: the bound method
                # of each project class the object may be an instance of.
                for held in self.model.values.of(value.module, node.value, value.scope, value.frame, at=value.at):
                    for owner_module, info in self.instances_of(held):
                        bound = self.method(owner_module, info, node.attr.value)
                        if bound is not None and bound not in out:
                            out.append(bound)
            if function is None and isinstance(node, (cst.Name, cst.Attribute)):
                name = dotted(node)
                found = self.model.resolver.name(value.module, name, value.scope) if name else None
                if found is not None and (found.kind == "function" or constructors and found.kind == "class"):
                    callees = self._of_target(found)
                    function = callees[0][0] if callees else None
            if function is not None and function not in out:
                out.append(function)
        return out

    def is_subclass(self, target: Target | None, api_name: str, depth: int = _MAX_MRO) -> bool:
        """Whether `target` is the outside class `api_name` or a project class derived from it,
        read from the modules' indexes (no parse)."""
        if target is None or depth <= 0:
            return False
        if target.external is not None:
            return target.external == api_name or _EXTERNAL_BASES.get(target.external) == api_name \
                or api.derived_from(target.external) == api_name
        if target.kind != "class" or target.path is None:
            return False
        index = self.model.project.index(target.path)
        if index is None:
            return False
        for base in index.classes.get(target.name, ()):
            found = self.model.resolve_in(target.path, base)
            if self.is_subclass(found, api_name, depth - 1):
                return True
        return False

    def is_network(self, value: Value) -> bool:
        """A leaf that builds a project subclass of `nn.Module` (read from the indexes)."""
        call = value.call
        site = value.module.call_at(call) if call is not None else None
        target = site.target if site is not None else None
        return target is not None and target.kind == "class" and self.is_subclass(target, api.MODULE_BASE)

    def instance_of(self, value: Value) -> tuple[ModuleModel, ClassInfo] | None:
        """The project class a value is an instance of: a leaf that calls the class, or a
        parameter annotated with it (`def main(exp: Exp, args)`) that the model cannot follow
        to its arguments."""
        call = value.call
        if call is None:
            node = value.node
            if isinstance(node, Param) and node.annotation is not None:
                return self._annotated(value.module, node, value.scope)
            return None
        site = value.module.call_at(call)
        target = site.target if site is not None else None
        if target is None and site is not None:
            return self._nested_class(site)
        if target is None or target.kind != "class":
            return None
        return self.class_at(target)

    @staticmethod
    def _nested_class(site: CallSite) -> tuple[ModuleModel, ClassInfo] | None:
        """The class a call names when that class is defined in an enclosing function (`class
        WrappedDataLoader:` inside `build_dataset`, then `WrappedDataLoader(loader, f)` there):
        names bound in a function resolve to no target, but the class is the project's."""
        func = site.node.func
        if not isinstance(func, cst.Name):
            return None
        for scope in site.scope.chain():
            if scope.kind != "function":
                continue
            if func.value in scope.assignments:
                info = site.module.classes.get(f"{scope.qualname}.{func.value}")
                return (site.module, info) if info is not None else None
        return None

    def instances_of(self, value: Value) -> list[tuple[ModuleModel, ClassInfo]]:
        """The project classes a value may be an instance of: `instance_of`, or, for a call of a
        class chosen at run time (`Exp = ExpForecast if ... else ExpImpute` then `Exp(args)`,
        `BACKENDS[name](args)`), each class the callee may be."""
        one = self.instance_of(value)
        if one is not None:
            return [one]
        call = value.call
        site = value.module.call_at(call) if call is not None else None
        if site is None or site.target is not None and site.target.kind != "value":
            return []
        return self.chosen_classes(site)

    def chosen_classes(self, site: CallSite) -> list[tuple[ModuleModel, ClassInfo]]:
        """The project classes a call's callee may hold when it is a variable or a table entry
        rather than a class's name: every leaf of its value flow names a project class (one
        leaf the model cannot read, and the callee is unknown)."""
        func = site.node.func
        looked_up = isinstance(func, cst.Call) and dotted(func.func) == "getattr"  # `getattr(tasks, name)()`
        if not isinstance(func, (cst.Name, cst.Subscript)) and not looked_up:
            return []
        key = id(site.node)
        found = self._chosen.get(key)
        if found is not None:
            return found
        self._chosen[key] = []  # (a cycle through this call reads as unknown)
        found = []
        if not isinstance(func, cst.Name) or site.scope.lookup(func.value):
            for value in self.model.values.at_call(site, func):
                named = self._class_named(value)
                listed = [named] if named is not None else self._namespace_classes(value)
                if not listed:
                    found = []
                    break
                for one in listed:
                    if all(one[1] is not c[1] for c in found):
                        found.append(one)
        if self.model.values.whole:
            self._chosen[key] = found
        else:
            del self._chosen[key]
        return found

    def _namespace_classes(self, value: Value) -> list[tuple[ModuleModel, ClassInfo]]:
        """`tasks.__dict__[cfg.TASK]` or `getattr(tasks, name)` over a project module (a
        package's `__init__` that imports its task classes): each class the module's top level
        holds, the key being unknown. Empty unless every name there that could be called is a
        project class — a function, a value or a star import leaves the choice unknown;
        submodules and plain `import x` modules are not callable and are passed over."""
        node = value.node
        holder: cst.BaseExpression | None = None
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) \
                and node.value.attr.value == "__dict__" and len(node.slice) == 1:
            holder = node.value.value
        elif isinstance(node, cst.Call) and dotted(node.func) == "getattr" and len(node.args) == 2 \
                and not any(a.keyword is not None or a.star for a in node.args):
            holder = node.args[0].value
        name = dotted(holder) if holder is not None else None
        target = self.model.resolver.name(value.module, name, value.scope) if name else None
        if target is None or target.kind != "module" or target.path is None:
            return []
        index = self.model.project.index(target.path)
        if index is None or index.stars or index.functions \
                or any(not (n.startswith("__") and n.endswith("__")) for n in index.assigned):
            return []
        out: list[tuple[ModuleModel, ClassInfo]] = []
        for defined in index.classes:
            found = self.class_at(Target(None, target.path, defined, "class"))
            if found is None:
                return []
            out.append(found)
        for alias, origin in index.aliases.items():
            imported = self.model.resolver.in_module(target.path, alias)
            if imported is not None and imported.kind == "module" or imported is not None \
                    and imported.external is not None and origin == alias and "." not in origin:
                continue  # a submodule, `import torch`: not a class the key could name
            found = self.class_at(imported) if imported is not None else None
            if found is None:
                return []
            out.append(found)
        return out

    def _class_named(self, value: Value) -> tuple[ModuleModel, ClassInfo] | None:
        """The project class a leaf names (`ExpForecast`, `backends.NcclBackend`), not calls."""
        node = value.node
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        name = dotted(node)
        target = self.model.resolver.name(value.module, name, value.scope) if name else None
        return self.class_at(target) if target is not None and target.kind == "class" else None

    def _annotated(self, module: ModuleModel, param: Param, scope: Scope) -> tuple[ModuleModel, ClassInfo] | None:
        """The project class a parameter's annotation names: `Exp`, `"Exp"`, `Optional[Exp]`,
        `Exp | None` (the class or one derived from it: its methods as the class defines them)."""
        name = annotation_name(param.annotation)
        if name is None:
            return None
        where = scope.parent if scope.kind == "function" and scope.parent is not None else scope
        target = self.model.resolver.name(module, name, where)
        return self.class_at(target) if target is not None else None

    def member_values(self, instance: tuple[ModuleModel, ClassInfo], made: Value, attr: str, depth: int) -> list[Value]:
        """What `instance.attr` may hold: `self.attr` set in a method of the class or its bases
        (the constructor's parameters bound to the arguments of the call that made it), or the
        returns of a property."""
        module, info = instance
        site = made.module.call_at(made.call) if made.call is not None else None
        out: list[Value] = []
        init = self.method(module, info, "__init__")
        frame = Frame(init, site, made.frame, "constructor") if init is not None and site is not None else None
        for owner_module, owner in self.mro(module, info):
            if attr in owner.properties:
                getter = Function(owner_module, owner.methods[attr])
                for value in owner_module.returns.get(getter.qualname, ()):
                    out.append(Value(owner_module, value, getter.scope, None))
                return out
            assigned = owner.scope.assignments.get(f"self.{attr}")
            if assigned:
                for binding in assigned:
                    out.append(Value(owner_module, binding, owner.scope, frame))
                return out
        if site is not None:
            out += self._dataclass_field(module, info, site, made.frame, attr)
        if not out:
            out = self._class_attribute(module, info, made, attr)
        return out

    def class_read(self, named: Value, attr: str) -> list[Value]:
        """`Config.lr` read on the class itself (`class Config: lr = 1e-3`): the value its body
        assigns, read as on an instance; unknown where the project assigns `Config.lr = ...`."""
        name = dotted(named.node) if isinstance(named.node, cst.BaseExpression) else None
        target = self.model.resolver.name(named.module, name, named.scope) if name else None
        found = self.class_at(target) if target is not None else None
        if found is None:
            return []
        module, info = found
        key = (id(named.module), id(info), attr)
        if key not in self._class_reads:
            written = re.compile(rf"\b{re.escape(info.node.name.value)}\.{re.escape(attr)}\s*(?:[-+*/]?=)(?!=)")
            self._class_reads[key] = not any(written.search(m.source) for m in
                                             {id(named.module): named.module, id(module): module}.values())
        return self._class_attribute(module, info, named, attr) if self._class_reads[key] else []

    def _class_attribute(self, module: ModuleModel, info: ClassInfo, made: Value, attr: str) -> list[Value]:
        """`cfg.lr` on an instance of a plain settings class (`class TrainConfig: lr = 5e-5`, then
        `cfg = TrainConfig()`): the value its class body (or a project base's) assigns. Unknown
        for a dataclass (a command-line binder fills its defaults), for a class with a base from
        outside the project (a settings library's), and where the instance's or the class's
        module sets attributes by name (`setattr(cfg, key, value)` from a file)."""
        chain = self.mro(module, info)
        if any(_is_dataclass(m, c) for m, c in chain):
            return []
        for owner_module, owner in chain:
            for base in owner.bases:
                name = dotted(base)
                if name == "object":
                    continue
                target = self.model.resolver.name(owner_module, name, owner.scope.parent) if name else None
                if target is None or self.class_at(target) is None:
                    return []
        if any(_sets_by_name(m) for m in {id(made.module): made.module, id(module): module}.values()):
            return []
        for owner_module, owner in chain:
            body = [b for b in owner.scope.assignments.get(attr, ()) if isinstance(b, cst.BaseExpression)]
            if body:
                return [Value(owner_module, b, owner.scope, None) for b in body]
        return []

    def _dataclass_field(self, module: ModuleModel, info: ClassInfo, site: CallSite, frame: Frame | None,
                         attr: str) -> list[Value]:
        """`made.attr` for a field of a `@dataclass`, whose generated `__init__` stores each
        argument: what the call that made it passes for the field (`Info(rank=r)`, or by
        position), or what a subclass's own `__init__` hands the generated one
        (`super().__init__(rank=read_env("RANK"))`). A field the call leaves to its default
        stays unknown: a default is often what a command-line binder fills."""
        chain = self.mro(module, info)
        for index, (owner_module, owner) in enumerate(chain):
            if not _is_dataclass(owner_module, owner):
                continue
            fields = [n.target.value for n in owner.node.body.body
                      if isinstance(n, cst.SimpleStatementLine) for n in n.body
                      if isinstance(n, cst.AnnAssign) and isinstance(n.target, cst.Name)]
            if attr not in fields or any("__init__" in c.methods for _, c in chain[index:]):
                return []
            own = next((Function(m, c.methods["__init__"]) for m, c in chain[:index] if "__init__" in c.methods), None)
            if own is None:
                passed = argument(site.node, attr, None if any(a.star for a in site.node.args) else fields.index(attr))
                if passed is None and _defaults_stand(owner_module, owner, site, attr,
                                                      self.model.imported_modules(site.module)):
                    # `cfg = TrainConfig()` of a dataclass nothing binds: the class body's default.
                    return [Value(owner_module, b, owner.scope, None) for b in owner.scope.assignments.get(attr, ())
                            if isinstance(b, cst.BaseExpression)]
                return [Value(site.module, passed, site.scope, frame, site.point)] if passed is not None else []
            # A subclass's constructor: its `super().__init__(...)` call to the generated one.
            inner = Frame(own, site, frame, "constructor")
            out = []
            for call in own.module.calls_in(own.qualname):
                func = call.node.func
                if isinstance(func, cst.Attribute) and func.attr.value == "__init__" \
                        and isinstance(func.value, cst.Call) and dotted(func.value.func) == "super":
                    passed = argument(call.node, attr)
                    if passed is not None:
                        out.append(Value(call.module, passed, call.scope, inner, call.point))
            return out
        return []

    # --- project subclasses of torch classes ----------------------------------------------------
    def base_init(self, site: CallSite, api_class: str, frame: Frame | None = None,
                  depth: int = 3) -> BaseInit | None:
        """The call that runs the torch constructor `api_class` for `site`: `site` itself when
        it calls the torch class or a project subclass that keeps torch's `__init__`; else the
        `super().__init__(...)` (or `Base.__init__(self, ...)`) inside the subclass's
        constructor, with the frame that binds the constructor's parameters to `site`'s
        arguments (`class DistLoader(DataLoader): def __init__(self, ds, bs): super().__init__(
        ds, bs, sampler=DistributedSampler(ds))`). None when the model cannot see it."""
        name = self.model.api(site)
        if name == api_class:
            return BaseInit(site, frame, 0, None)
        if name is not None and api.derived_from(name) == api_class:
            return BaseInit(site, frame, 0, None, api.DERIVED_CLASSES[name][1])
        target = site.target
        found = self.class_at(target) if target is not None and target.kind == "class" else None
        if found is None or not self.is_subclass(target, api_class):
            return None
        return self._base_init_of(site, found, api_class, frame, depth)

    def _base_init_of(self, site: CallSite, found: tuple[ModuleModel, ClassInfo], api_class: str,
                      frame: Frame | None, depth: int, bound: str = "constructor") -> BaseInit | None:
        module, info = found
        init = self.method(module, info, "__init__")
        if init is None:
            return BaseInit(site, frame, 0, None)  # torch's own constructor, with these arguments
        if depth <= 0:
            return None
        inner = Frame(init, site, frame, bound)
        owner_module, owner = next(((m, c) for m, c in self.mro(module, info) if init.qualname in c.methods.values()
                                    and m is init.module), (module, info))
        for call in init.module.calls_in(init.qualname):
            func = call.node.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__"):
                continue
            receiver = func.value
            if isinstance(receiver, cst.Call) and dotted(receiver.func) == "super":
                chain = self.mro(owner_module, owner)
                after = chain[1] if len(chain) > 1 else None
                if after is not None and self.is_subclass(self._target_of(*after), api_class):
                    return self._base_init_of(call, after, api_class, inner, depth - 1, "method")
                return BaseInit(call, inner, 0, init)
            name = dotted(receiver)
            base = self.model.resolver.name(init.module, name, init.scope) if name else None
            if base is None:
                continue
            if base.external is not None and api.canonical(base.external) == api_class:
                return BaseInit(call, inner, 1, init)
            if base.kind == "class" and self.is_subclass(base, api_class):
                project_base = self.class_at(base)
                if project_base is not None:
                    return self._base_init_of(call, project_base, api_class, inner, depth - 1, "")
        return None

    def _target_of(self, module: ModuleModel, info: ClassInfo) -> Target | None:
        path = resolved_path(module.path)
        return Target(None, path, info.qualname, "class") if path is not None else None

    def base_argument(self, site: CallSite, api_class: str, keyword: str, position: int | None,
                      frame: Frame | None = None) -> list[Value] | None:
        """What the torch constructor `api_class` gets as `keyword` (or at torch's `position`)
        when `site` builds an instance: [] when nothing is passed (torch's default), None when
        the model cannot tell (no visible base call, options handed on as `**kwargs` it cannot
        read)."""
        found = self.base_init(site, api_class, frame)
        if found is None:
            return None
        call = found.call
        if position is not None and found.positional is not None and position >= found.positional:
            position = None
        expr = argument(call.node, keyword, position + found.shift if position is not None else None)
        if expr is not None:
            return self.model.values.of(call.module, expr, call.scope, found.frame, at=call.point)
        stars = [a.value for a in call.node.args if a.star == "**"]
        if not stars:
            return []
        init = found.init
        if init is not None and found.frame is not None and len(stars) == 1 and isinstance(stars[0], cst.Name):
            bindings = init.scope.assignments.get(stars[0].value, [])
            if len(bindings) == 1 and isinstance(bindings[0], Param) and bindings[0].star == "**":
                # `super().__init__(dataset, **kwargs)`: the options the subclass was called with.
                outer = found.frame.call
                passed = argument(outer.node, keyword)
                if passed is not None:
                    return self.model.values.of(outer.module, passed, outer.scope, found.frame.caller, at=outer.point)
                return None if has_star_kwargs(outer.node) else []
        return None

    # --- attributes set on arguments ------------------------------------------------------------
    def attribute_writes(self, module: ModuleModel, node: cst.Attribute, scope: Scope, frame: Frame | None,
                         at: Point | None, depth: int = 3, imported: bool = True
                         ) -> list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]]:
        """What `name.attr` holds when a project function the name was passed to set it:
        `init_distributed_mode(args)` assigning `args.rank = int(os.environ["RANK"])`, then
        `args.rank` read here (or in a function `args` is passed on to). Calls made before `at`
        in `scope` count; a parameter is followed to the call that passed it (`frame`, or the
        known callers), where the caller's own assignment before that call counts too
        (`args.local_rank = dist.get_rank()`, then `train(args)`). A global imported from a
        project module (`from params import args`, where params.py runs `args =
        set_template(args)` or `args.lr = 1e-5` at import) is followed to that module's top level
        (`imported`: one such step). Each write: (module, value, the scope that made it, its
        frame, where)."""
        base = node.value
        if not isinstance(base, cst.Name) or base.value in ("self", "cls") or depth <= 0:
            return []
        attr = node.attr.value
        out: list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]] = []
        for call in self.passing(module, scope).get(base.value, ()):
            if at is not None and call.tick >= at.tick and not set(call.loops) & set(at.loops):
                continue
            for function, bound in self.targets(call):
                for param in function.params():
                    passed = self.argument_for(call, function, param, bound)
                    if not (isinstance(passed, cst.Name) and passed.value == base.value):
                        continue
                    inner = Frame(function, call, frame, bound)
                    key = f"{param.name}.{attr}"
                    assigned = function.scope.assignments.get(key, [])
                    points = function.scope.points.get(key, [])
                    for i, binding in enumerate(assigned):
                        out.append((function.module, binding, function.scope, inner,
                                    points[i] if len(points) == len(assigned) else None))
                    if not assigned:
                        out += self.attribute_writes(function.module, cst.Attribute(cst.Name(param.name), node.attr),
                                                     function.scope, inner, None, depth - 1)
        if out:
            return out
        if scope.kind == "module":
            return self._imported_attribute_writes(module, node, scope, depth) if imported else out
        if scope.kind != "function":
            return out
        # `def main(args): ... args.rank` after the caller ran `init_distributed_mode(args)`.
        bindings = scope.assignments.get(base.value, [])
        if not bindings and imported:
            # `args.lr` in a function of a module that imported `args` (`from params import args`).
            return self._imported_attribute_writes(module, node, scope, depth)
        if len(bindings) != 1 or not isinstance(bindings[0], Param):
            return out
        param = bindings[0]
        function = Function(module, param.function)
        calls = [(frame.call, frame.bound)] if frame is not None and frame.function == function \
            else self.callers(function)[:4]
        for call, bound in calls:
            passed = self.argument_for(call, function, param, bound)
            if isinstance(passed, cst.Name):
                caller = frame.caller if frame is not None and frame.call is call else None
                # `args.local_rank = dist.get_rank()` in the caller itself, before `train(args)`.
                key = f"{passed.value}.{attr}"
                if call.point is not None and key in call.scope.assignments:
                    reaching = call.scope.reaching(key, call.point)
                    assigned = call.scope.assignments[key]
                    points = call.scope.points.get(key, [])
                    for i, binding in enumerate(assigned):
                        if any(binding is r for r in reaching):
                            out.append((call.module, binding, call.scope, caller,
                                        points[i] if len(points) == len(assigned) else None))
                out += self.attribute_writes(call.module, cst.Attribute(passed, node.attr), call.scope,
                                             caller, call.point, depth - 1)
        return out

    def _imported_attribute_writes(self, module: ModuleModel, node: cst.Attribute, scope: Scope, depth: int
                                   ) -> list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]]:
        """`name.attr` where `name` is a global this module imports from a project module (and
        never binds itself): what that module's top level, run in full at import, set on it,
        itself (`args.lr = 1e-5`) or through a function it handed the object to."""
        base = node.value
        assert isinstance(base, cst.Name)
        if base.value in module.module_scope.assignments:
            return []
        target = self.model.resolver.name(module, base.value, scope)
        if target is None or target.external is not None or target.kind != "value" or target.path is None:
            return []
        other = self.model.project_model(target.path)
        if other is None or other is module or "." in target.name:
            return []
        top = other.module_scope
        key = f"{target.name}.{node.attr.value}"
        assigned = top.assignments.get(key, [])
        points = top.points.get(key, [])
        out: list[tuple[ModuleModel, Binding, Scope, Frame | None, Point | None]] = [
            (other, binding, top, None, points[i] if len(points) == len(assigned) else None)
            for i, binding in enumerate(assigned)]
        out += self.attribute_writes(other, cst.Attribute(cst.Name(target.name), node.attr), top, None, None,
                                     max(depth - 1, 1), imported=False)
        return out

    def passing(self, module: ModuleModel, scope: Scope) -> dict[str, list[CallSite]]:
        """name → the calls of project functions made directly in `scope` that pass it as an
        argument (read once per scope)."""
        key = (id(module), scope.qualname)
        found = self._passed_names.get(key)
        if found is None:
            found = {}
            for call in module.calls_in(scope.qualname):
                if call.scope is not scope:
                    continue
                for a in call.node.args:
                    if isinstance(a.value, cst.Name):
                        found.setdefault(a.value.value, []).append(call)
            self._passed_names[key] = found
        return found

    # --- targets -----------------------------------------------------------------------------
    def targets(self, site: CallSite) -> list[Callee]:
        """The project functions `site` may run, each with how it is bound."""
        key = id(site.node)
        cached = self._targets.get(key)
        if cached is not None:
            return cached
        if not self.model.reach_complete:
            # An answer resting on callers the reach has not all found serves until the reach
            # is complete: asked again and again while it grows, it would cost its work each
            # time and could spend the reach's whole evaluation budget.
            held = self._pending.get(key)
            if held is not None:
                return held
        if key in self._in_progress or len(self._in_progress) >= _MAX_NESTED_LOOKUPS:
            return []
        self._in_progress.add(key)
        outer, self._provisional = self._provisional, False
        try:
            found = self._find(site)
        finally:
            self._in_progress.discard(key)
            provisional, self._provisional = self._provisional, outer or self._provisional
        if not provisional and self.model.values.whole:
            self._targets[key] = found
        elif not self.model.reach_complete:
            self._pending[key] = found
        return found

    @staticmethod
    def _entered(site: CallSite) -> bool:
        """`site` is the context expression of a `with` item (`with Manager(...) as m:`)."""
        return any(item.item is site.node for w in site.module.withs for item in w.items)

    def _find(self, site: CallSite) -> list[Callee]:
        target = site.target
        if target is not None:
            if target.external is not None:
                return self._started(site, target.external)
            named = self._of_target(target)
            if target.kind == "class" and self._entered(site):
                # `with DDPManager():` runs the class's `__enter__` and `__exit__` too (a set-up
                # that makes the process group on entry and destroys it on exit).
                entered = self.class_at(target)
                if entered is not None:
                    named = named + [(m, "method") for m in (self.method(*entered, "__enter__"),
                                                            self.method(*entered, "__exit__")) if m is not None]
            attribute = isinstance(site.node.func, cst.Attribute)
            if named or target.kind != "value" and (target.kind != "member" or not attribute):
                return named
            if target.kind == "value" and isinstance(site.node.func, cst.Name):
                return self._constructors(site) or self._through_values(site, site.node.func)
            # `model.module.reset()` with `model = DDP(Net())` at module level: a member of a
            # module-level value that the names alone do not resolve; the value flow below does
            # (the method of the class the wrapper holds).
        func = site.node.func
        module = site.module
        if isinstance(func, cst.Name):
            name = func.value
            for scope in site.scope.chain():
                if scope.kind == "function":
                    nested = f"{scope.qualname}.{name}"
                    if nested in module.functions:
                        return [(Function(module, nested), "")]
            return self._constructors(site) or self._through_values(site, func)
        if isinstance(func, cst.Subscript):
            return self._constructors(site) or self._table_functions(site, func)
        if isinstance(func, cst.Call) and dotted(func.func) == "getattr" and not site.scope.lookup("getattr"):
            return self._named_functions(site, func)
        if not isinstance(func, cst.Attribute):
            return []
        method = func.attr.value
        receiver = func.value
        owner = site.scope.class_scope
        if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls") and owner is not None:
            info = module.classes.get(owner.qualname)
            if info is not None:
                own: list[Callee] = [(f, "" if f.is_static else "method") for f in self.methods(module, info, method)]
                for override in self.overrides(module, info, method):
                    if all(override != f for f, _ in own):
                        own.append((override, "method"))
                if own:
                    return own
            # `self.scaler(loss, ...)`: an attribute holding a callable object.
            return self._through_values(site, func)
        if isinstance(receiver, cst.Call) and dotted(receiver.func) == "super" and owner is not None:
            info = module.classes.get(owner.qualname)
            if info is not None:
                found = self.method(module, info, method, after=info)
                if found is not None:
                    return [(found, "method")]
            return []
        if method not in self.method_names(module):
            return []  # no class of the project defines it: `loss.backward()`, `x.to(device)`
        out: list[Callee] = []
        values = self.model.values.at_call(site, receiver)
        for value in values:
            if method in api.MODULE_METHODS and self.is_network(value):
                continue  # `model.train()`, `model.parameters()` on a project network
            for instance in self.instances_of(value):
                for found in self.methods(*instance, method):
                    if all(found != f for f, _ in out):
                        out.append((found, "" if found.is_static else "method"))
            named_class = self._class_named(value)
            if named_class is not None:
                # `Config = CONFIGS[name]`, then `Config.make_model()`: the class itself, not an
                # instance; its static methods (and class methods, which take the class as
                # their first parameter) are what the call runs.
                for found in self.methods(*named_class, method):
                    if found.is_static or "classmethod" in decorator_names(found.module, found.qualname):
                        if all(found != f for f, _ in out):
                            out.append((found, "" if found.is_static else "method"))
        if out:
            return out
        if values and all(self.instances_of(v) for v in values):
            # Instances of project classes that do not define the method: it is a torch base's
            # (`set_epoch` of a DistributedSampler subclass), not another class's of that name.
            return []
        return self._by_unique_name(site, method)

    def _started(self, site: CallSite, name: str) -> list[Callee]:
        """`mp.spawn(worker, args=(...))`, `start_processes(worker, ...)`,
        `multiprocessing.Process(target=worker, args=(...))`: the worker runs in every process it
        starts, as if called here ("spawn": its first parameter is the process index)."""
        if name not in api.PROCESS_STARTERS:
            return []
        process = name.endswith("Process")
        fn = site.arg("target") if process else site.arg("fn", 0)
        if fn is None:
            return []
        kind = "process" if process else "spawn"
        return [(function, kind) for function in self.functions_in(site, fn, constructors=True)]

    def _constructors(self, site: CallSite) -> list[Callee]:
        """`Exp(args)` where `Exp` holds one of several project classes, `BACKENDS[name](args)`:
        the constructor of each. A network class among them is not followed (building a
        network is not DDP work; see Paths)."""
        out: list[Callee] = []
        for module, info in self.chosen_classes(site):
            if self.is_subclass(self._target_of(module, info), api.MODULE_BASE):
                return []
            for made in self._built_by(module, info):
                if all(made != f for f, _ in out):
                    out.append((made, "constructor"))
        return out

    def _built_by(self, module: ModuleModel, info: ClassInfo) -> list[Function]:
        """What calling the class runs: its `__new__` where the project defines one (a
        singleton `Options()` that parses the command line there), then its `__init__`."""
        found = [self.method(module, info, "__new__"), self.method(module, info, "__init__")]
        return [f for f in found if f is not None]

    def overrides(self, module: ModuleModel, info: ClassInfo, name: str) -> list[Function]:
        """What `self.name()` inside the class may run besides its own method: the overrides in
        the project subclasses the linted file defines or imports (a base trainer's `train()`
        calling `self.train_step()` that `class MyTrainer(Trainer)` defines). A subclass the
        script never names is not taken to be the instance's class."""
        key = (id(info), name)
        found = self._overrides.get(key)
        if found is not None:
            return found
        found = []
        own = self.method(module, info, name)
        for sub_module, sub in self._script_classes():
            if sub is info or not any(c[1] is info for c in self.mro(sub_module, sub)[1:]):
                continue
            override = self.method(sub_module, sub, name)
            if override is not None and override != own and override not in found:
                found.append(override)
        self._overrides[key] = found
        return found

    def built_subclasses(self, module: ModuleModel, info: ClassInfo) -> list[tuple[ModuleModel, ClassInfo]]:
        """The project subclasses of a class, defined beside it or named by the linted file, that
        some known call builds (`TrainerDDP(...)` for `class TrainerDDP(TrainerSingle)` with its
        own `__init__`): the classes a method of the base may run on besides the base itself."""
        key = (id(info), "<built subclasses>")
        found = self._subclasses.get(key)
        if found is not None:
            return found
        found = []
        beside = [(module, c) for c in module.classes.values() if "." not in c.qualname]
        for sub_module, sub in beside + self._script_classes():
            if sub is info or any(sub is c for _, c in found) \
                    or not any(c[1] is info for c in self.mro(sub_module, sub)[1:]):
                continue
            init = sub.methods.get("__init__")
            if init is not None and self.callers(Function(sub_module, init)):
                found.append((sub_module, sub))
        if self.model.reach_complete and self.model.values.whole:
            self._subclasses[key] = found
        return found

    def _script_classes(self) -> list[tuple[ModuleModel, ClassInfo]]:
        """The project classes the linted file defines or imports by name."""
        if self._script is not None:
            return self._script
        root = self.model.root
        found: list[tuple[ModuleModel, ClassInfo]] = [(root, c) for c in root.classes.values() if "." not in c.qualname]
        for local in sorted(root.names.aliases):
            target = self.model.resolver.name(root, local, root.module_scope)
            named = self.class_at(target) if target is not None and target.kind == "class" else None
            if named is not None and all(named[1] is not c[1] for c in found):
                found.append(named)
        self._script = found
        return found

    def _table_functions(self, site: CallSite, func: cst.Subscript) -> list[Callee]:
        """`{"coco": eval_coco, "voc": eval_voc}[cfg.kind](...)`, `STEPS[args.mode](...)`: each
        project function of the table, when every entry the key may choose is one (an entry the
        model cannot read, or a class or instance among them, and the callee is unknown)."""
        out: list[Callee] = []
        for value in self.model.values.at_call(site, func):
            function = self._function_named(value)
            if function is None:
                return []
            if self._builds_network(function):
                return []  # a table of network factories: building a network is not DDP work
            if all(function != f for f, _ in out):
                out.append((function, ""))
        return out

    def _builds_network(self, function: Function) -> bool:
        """Whether a function returns a project network it builds (`def vq_16(**kw): return
        VQModel(...)`, `model = FCN(...); return model`)."""
        for expr in function.module.returns.get(function.qualname, ()):
            for value in self.model.values.of(function.module, expr, function.scope):
                if self.is_network(value):
                    return True
        return False

    def _named_functions(self, site: CallSite, func: cst.Call) -> list[Callee]:
        """`getattr(steps, name)(...)` on a project module, where every value `name` may hold is
        a string literal naming a function of that module (otherwise unknown)."""
        if len(func.args) != 2 or any(a.keyword is not None or a.star for a in func.args):
            return []
        holder = dotted(func.args[0].value)
        target = self.model.resolver.name(site.module, holder, site.scope) if holder else None
        if target is None or target.kind != "module" or target.path is None:
            return []
        module = self.model.project_model(target.path)
        if module is None:
            return []
        out: list[Callee] = []
        for value in self.model.values.at_call(site, func.args[1].value):
            name = string_text(value.node) if isinstance(value.node, cst.SimpleString) else None
            spelled = _spelled_names(value) if name is None else None
            if spelled is not None:
                # `getattr(common_utils, "init_dist_%s" % args.launcher)(...)` with `--launcher`
                # one of `choices=["none", "pytorch", "slurm"]`: the functions of the module the
                # choices name (`init_dist_pytorch`, `init_dist_slurm`). A name the command line
                # spells freely stays unknown.
                names = sorted(n for n in spelled if n in module.functions)
                if not names:
                    return []
            elif name is None or name not in module.functions or "." in name:
                return []
            else:
                names = [name]
            for name in names:
                function = Function(module, name)
                if self._builds_network(function):
                    return []
                if all(function != f for f, _ in out):
                    out.append((function, ""))
        return out

    def _function_named(self, value: Value) -> Function | None:
        """The project function (not a method or class) a leaf names."""
        node = value.node
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        name = dotted(node)
        target = self.model.resolver.name(value.module, name, value.scope) if name else None
        if target is None or target.kind != "function":
            return None
        callees = self._of_target(target)
        return callees[0][0] if callees else None

    def _through_values(self, site: CallSite, func: cst.BaseExpression) -> list[Callee]:
        """`step(...)` where `step` holds an instance with `__call__` or a function of the project
        (`train = train_base` then `train(...)`)."""
        out: list[Callee] = []
        name = dotted(func) or ""
        if not site.scope.lookup(name) and not name.startswith("self."):
            return out
        if "__call__" not in self.method_names(site.module):
            return self._held_functions(site, func)
        for value in self.model.values.at_call(site, func):
            if self.is_network(value):
                continue  # running a project network's forward is not DDP work to follow
            for instance in self.instances_of(value):
                found = self.method(*instance, "__call__")
                if found is not None and all(found != f for f, _ in out):
                    out.append((found, "instance"))
        return out or self._held_functions(site, func)

    def _held_functions(self, site: CallSite, func: cst.BaseExpression) -> list[Callee]:
        """The project functions a variable or attribute called at `site` holds: plain
        functions, and the methods it was handed bound to their object (`self.fn = fn` in a
        coordinator's `__init__`, given `Coordinator(self._worker, n)`, then `self.fn(rank)`),
        which take their `self` from the binding."""
        out: list[Callee] = [(f, "") for f in self.functions_in(site, func) if f.owner is None]
        for value in self.model.values.at_call(site, func):
            node = value.node
            if isinstance(node, Param) and not self.model.reach_complete:
                # `self.fn = fn` in `__init__`: the callers that hand the function in may be
                # found later in the reach.
                self._provisional = True
            if not (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
                    and node.value.value == "self"):
                continue
            owner = value.scope.class_scope
            info = value.module.classes.get(owner.qualname) if owner is not None else None
            found = self.method(value.module, info, node.attr.value) if info is not None else None
            if found is not None and not found.is_static and all(found != f for f, _ in out):
                out.append((found, "method"))
        return out

    def _of_target(self, target: Target) -> list[Callee]:
        if target.path is None:
            return []
        if target.kind == "function":
            module = self.model.project_model(target.path)
            if module is not None and target.name in module.functions:
                return [(Function(module, target.name), "")]
            return []
        if target.kind == "class":
            found = self.class_at(target)
            if found is not None:
                return [(made, "constructor") for made in self._built_by(*found)]
            return []
        if target.kind == "member":
            head, _, rest = target.name.rpartition(".")
            module = self.model.project_model(target.path)
            if module is None:
                return []
            if head in module.classes and "." not in rest:
                method = self.method(module, module.classes[head], rest)
                return [(method, "")] if method is not None else []
            if head in module.module_scope.assignments and "." not in head:
                # `logger.info(...)` where `logger = Logger()` at the top of a project module.
                out: list[Callee] = []
                for value in self.model.values.of(module, cst.Name(head), module.module_scope):
                    instance = self.instance_of(value)
                    if instance is not None:
                        method = self.method(*instance, rest)
                        if method is not None:
                            out.append((method, "method"))
                return out
        return []

    def _by_unique_name(self, site: CallSite, method: str) -> list[Callee]:
        """`meter.synchronize_between_processes()` on an object of unknown class: the one class of
        this module or of the project modules it imports that defines the method (a composite
        calling its parts' method of the same name is not calling itself)."""
        if method in _COMMON or method.startswith("__") or len(method) < 6:
            return []
        enclosing = site.scope.class_scope
        found: list[Function] = []
        for module in self._neighbourhood(site.module, method):
            for info in module.classes.values():
                qualname = info.methods.get(method)
                if qualname is None or (enclosing is not None and info.scope is enclosing and module is site.module):
                    continue
                found.append(Function(module, qualname))
                if len(found) > 1:
                    return []
        return [(found[0], "method")] if found else []

    def method_names(self, module: ModuleModel) -> frozenset[str]:
        """Method names defined in the project modules `module` may get objects from: itself, the
        linted file, and the project modules either imports, transitively (read from their
        texts). A method call by any other name cannot run project code."""
        # Kept per linted file: the answer includes that file's imports, and a project module
        # read while linting one file is shared with the files linted after it.
        key = f"method_names:{self.model.root.path}"
        found = module.memo.get(key)
        if found is None:
            names: set[str] = set()
            for text in self._import_closure(module):
                names |= self._methods_of(text)
            found = frozenset(names)
            module.memo[key] = found
        return found

    def import_closure(self, module: ModuleModel) -> list[str]:
        """The texts of `module`, the linted file and the project modules they import."""
        return self._import_closure(module)

    def _import_closure(self, module: ModuleModel) -> list[str]:
        texts = [module.source, self.model.root.source]
        start = self._start(module)
        for file in self._imported(start):
            text = self.model.project.text(file) if file not in start else None
            if text is not None:
                texts.append(text)
        return texts

    def _start(self, module: ModuleModel) -> list[Path]:
        return [p for p in (resolved_path(module.path), resolved_path(self.model.root.path)) if p is not None]

    def _imported(self, start: list[Path]) -> dict[Path, set[str] | None]:
        """The project files `start` imports, transitively (at most 200), each with the names
        imported from it, or None where a module takes it whole (`import utils`, `from pkg import
        module`, `*`); the files of `start` count whole."""
        wanted: dict[Path, set[str] | None] = {p: None for p in start}
        todo = list(start)
        while todo and len(wanted) < 200:
            path = todo.pop()
            index = self.model.project.index(path)
            if index is None:
                continue
            origins = [(origin, local) for local, origin in index.aliases.items()] + [(s, None) for s in index.stars]
            for origin, local in origins:
                where = locate(path, origin)
                if where is None:
                    continue
                file, rest = where
                names: frozenset[str] | None = frozenset({rest.split(".", 1)[0]}) if rest and local else None
                if names is None and local is not None and "." not in local and file.name != "__init__.py":
                    # A module file imported whole under a name (`from utils import split`): the
                    # importer reaches what it reads on that name (`split.make_split`), nothing
                    # more where it never reads it (the module's import-time statements stay).
                    text = self.model.project.text(path)
                    names = module_attributes_used(text, local) if text is not None else None
                before = wanted.get(file, set())
                if file not in wanted:
                    todo.append(file)
                if names is None:
                    wanted[file] = None
                elif before is not None:
                    wanted[file] = before | names
        return wanted

    def reached_code(self, module: ModuleModel) -> list[str]:
        """Like `import_closure`, but a project module imported only by name (`from hellaswag
        import iterate_examples`) gives the code those names reach (imported_code.py), not its
        whole text; one imported whole anywhere (`import utils`, `from pkg import module`, `*`)
        gives all of it."""
        key = f"reached_code:{self.model.root.path}"
        found = module.memo.get(key)
        if found is not None:
            return list(found)
        start = self._start(module)
        wanted = self._imported(start)
        texts = [module.source, self.model.root.source]
        for file, names in wanted.items():
            if file in start:
                continue
            text = self.model.project.text(file)
            if text is not None:
                texts.append(text if names is None else code_reached(text, frozenset(names)))
        module.memo[key] = tuple(texts)
        return texts

    def _methods_of(self, text: str) -> frozenset[str]:
        names = self._methods.get(text)
        if names is None:
            names = frozenset(_METHOD_DEF.findall(text))
            self._methods[text] = names
        return names

    def _defines(self, text: str, method: str) -> bool:
        """Whether a module's text defines an indented `def method(` (a method), read once."""
        names = self._methods.get(text)
        if names is None:
            names = frozenset(_METHOD_DEF.findall(text))
            self._methods[text] = names
        return method in names

    def _neighbourhood(self, module: ModuleModel, method: str) -> list[ModuleModel]:
        out = [module] if self._defines(module.source, method) else []
        path = resolved_path(module.path)
        if path is None:
            return out
        origins = set(module.names.aliases.values()) | set(module.names.stars)
        seen: set[str] = set()
        for origin in sorted(origins):
            where = locate(path, origin)
            if where is None:
                continue
            file = where[0]
            if str(file) in seen or str(file) == str(path):
                continue
            seen.add(str(file))
            text = self.model.project.text(file)
            if text is None or not self._defines(text, method):
                continue
            other = self.model.project_model(file)
            if other is not None:
                out.append(other)
        return out

    # --- arguments and callers -----------------------------------------------------------------
    def argument_for(self, call: CallSite, function: Function, param: Param, bound: str
                     ) -> cst.BaseExpression | CallSite | None:
        """What `call` passes to `param` of `function`: an expression of the caller, the call
        itself for the `self` of a constructor, or None."""
        if param.star:
            return None
        if bound in ("spawn", "process"):
            # The worker's parameters: the process index (spawn), then the `args=` tuple; a
            # spawned class's constructor takes the new instance first.
            position = (param.index if param.index is not None else -1) - (1 if bound == "spawn" else 0) \
                - (1 if function.owner is not None and not function.is_static else 0)
            passed = argument(call.node, "args")
            if isinstance(passed, cst.Name):
                # `train_args = (world_size, lr, ckpt); mp.spawn(train, args=train_args)`: the
                # tuple the name is bound to, when it is bound once in the spawning scope.
                bindings = call.scope.assignments.get(passed.value, [])
                held = getattr(bindings[0], "value", bindings[0]) if len(bindings) == 1 else None
                passed = held if isinstance(held, cst.Tuple) else passed
            if position < 0 or not isinstance(passed, cst.Tuple) or position >= len(passed.elements):
                return None
            element = passed.elements[position]
            return None if isinstance(element, cst.StarredElement) else element.value
        if param.index is None:
            return argument(call.node, param.name)
        position = param.index
        if bound:
            if position == 0:
                if bound == "constructor":
                    return call
                func = call.node.func
                if bound == "instance":
                    return func
                return func.value if isinstance(func, cst.Attribute) else None
            position -= 1
        return argument(call.node, param.name, position)

    def star_passed(self, site: CallSite, position: int) -> list[tuple[CallSite, cst.BaseExpression]]:
        """What the callers of `site`'s function pass at `position` of `site` when `site` forwards
        its function's `*args` there (`def save_on_master(*args, **kwargs): torch.save(*args,
        **kwargs)` called as `save_on_master(net.state_dict(), path)`: position 0 is the caller's
        `net.state_dict()`). Empty when the position is not forwarded from `*args` or a caller
        passes a `*` of its own before it (nothing known)."""
        scope = site.scope.function
        if scope is None or not isinstance(scope.node, cst.FunctionDef):
            return []
        params = scope.node.params
        star = params.star_arg
        if not isinstance(star, cst.Param):
            return []
        before = 0  # positional arguments of `site` before its `*args`
        for arg in site.node.args:
            if arg.keyword is not None:
                continue
            if arg.star == "*":
                if not (isinstance(arg.value, cst.Name) and arg.value.value == star.name.value):
                    return []
                break
            if arg.star:
                return []
            before += 1
        else:
            return []
        index = position - before
        if index < 0:
            return []
        fixed = len(params.posonly_params) + len(params.params)
        function = Function(site.module, scope.qualname)
        out: list[tuple[CallSite, cst.BaseExpression]] = []
        for call, bound in self.callers(function):
            if bound in ("spawn", "process", "constructor"):
                continue
            wanted = fixed + index - (1 if bound else 0)
            positional = [a for a in call.node.args if a.keyword is None]
            if any(a.star for a in positional[: wanted + 1]) or wanted >= len(positional):
                continue
            out.append((call, positional[wanted].value))
        return out

    def callers(self, function: Function) -> list[tuple[CallSite, str]]:
        """Known calls of `function`: in its own module, and the calls that reached it from the
        linted file (see Model.reach)."""
        key = (id(function.module), function.qualname)
        cached = self._callers.get(key)
        if cached is not None:
            return cached
        out: list[tuple[CallSite, str]] = []
        seen: set[int] = set()
        for module in dict.fromkeys([function.module, self.model.root]):
            for call in self._candidates(module, function):
                for callee, bound in self.targets(call):
                    if callee == function and id(call.node) not in seen:
                        seen.add(id(call.node))
                        out.append((call, bound))
        for call, bound in self.model.edges_into(function):
            if id(call.node) not in seen:
                seen.add(id(call.node))
                out.append((call, bound))
        if self.model.reach_complete and self.model.values.whole:
            self._callers[key] = out
        return out

    def _candidates(self, module: ModuleModel, function: Function) -> list[CallSite]:
        name = function.name
        if name in ("__init__", "__new__"):
            owner = function.owner
            wanted = owner.qualname.rsplit(".", 1)[-1] if owner is not None else None
            return [c for c in module.calls if c.dotted is not None and (
                c.dotted.rsplit(".", 1)[-1] == wanted or (c.target is not None and c.target.kind == "class"))]
        if name == "__call__":
            return [c for c in module.calls if c.qualname is None and c.dotted is not None]
        # `mp.spawn(worker, ...)` calls `worker` under another name: a script that both spawns
        # its worker and calls it directly on one GPU (`else: worker(0, args)`) has two callers.
        # `Trainer(...).fit()`: a method called on a value that has no dotted name.
        calls = module.calls
        by_name, written = _calls_by_name(module)
        starters = api.PROCESS_STARTERS
        # Resolution may still change a call's qualname: the starters are read each time.
        found = [c.index for c in written if c.qualname in starters]
        named = by_name.get(name)
        if named:
            found = sorted(set(found).union(named)) if found else named
        return [calls[i] for i in found]


def _calls_by_name(module: ModuleModel) -> tuple[dict[str, list[int]], list[CallSite]]:
    """The positions of `module`'s calls by method name and by the last part of their dotted
    name, and the calls that have a dotted name (both fixed when a call is recorded): asked for
    every function whose callers a rule reads."""
    calls = module.calls
    known = module.memo.get("calls_by_name")
    if known is not None and known[0] == len(calls):
        return known[1], known[2]
    by_name: dict[str, list[int]] = {}
    written: list[CallSite] = []
    for i, c in enumerate(calls):
        if c.method is not None:
            by_name.setdefault(c.method, []).append(i)
        if c.dotted is not None:
            written.append(c)
            last = c.dotted.rsplit(".", 1)[-1]
            if last != c.method:
                by_name.setdefault(last, []).append(i)
    module.memo["calls_by_name"] = (len(calls), by_name, written)
    return by_name, written


# Outside classes derived from the ones rules ask about.
_EXTERNAL_BASES = {
    "torch.utils.data.DistributedSampler": "torch.utils.data.Sampler",
    "torch.utils.data.RandomSampler": "torch.utils.data.Sampler",
    "torch.utils.data.SequentialSampler": "torch.utils.data.Sampler",
    "torch.utils.data.BatchSampler": "torch.utils.data.Sampler",
    "torch.utils.data.SubsetRandomSampler": "torch.utils.data.Sampler",
    "torch.utils.data.WeightedRandomSampler": "torch.utils.data.Sampler",
}


def _sets_by_name(module: ModuleModel) -> bool:
    """The module writes attributes by name (`setattr(cfg, k, v)`, `cfg.__dict__.update(...)`)."""
    return bool(re.search(r"\bsetattr\(|__dict__\.update\(|vars\([^)]*\)\.update\(", module.source))


def _defaults_stand(module: ModuleModel, info: ClassInfo, site: CallSite, attr: str,
                    imported: list[ModuleModel]) -> bool:
    """A dataclass instance made with the field left to its default (no `*args` nor `**kw` in
    the call) keeps that default: the class is only ever defined, imported, called or named in
    annotations in its own module and the one that makes it — never handed to a command-line
    binder (`HfArgumentParser(TrainConfig)`, `tyro.cli(TrainConfig)`) —, and neither these nor
    the project modules the maker imports write the field (`cfg.lr = args.lr`) or attributes by
    name (`setattr(cfg, k, v)`)."""
    if any(a.star for a in site.node.args):
        return False
    name = info.node.name.value
    written = re.compile(rf"\.{re.escape(attr)}\s*(?:[-+*/]?=)(?!=)")
    if any(written.search(m.source) or _sets_by_name(m) for m in imported):
        return False
    for other in {id(m): m for m in (module, site.module)}.values():
        source = other.source
        if written.search(source) or _sets_by_name(other):
            return False
        for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\b", source):
            line = source[source.rfind("\n", 0, m.start()) + 1:m.start()]
            after = source[m.end():m.end() + 3].lstrip()
            if after.startswith("(") \
                    or re.search(r"(?:^\s*class|\w\s*:|->)\s*$", line) \
                    or re.match(r"\s*(?:from\s+\S+\s+)?import\b", line):
                continue
            return False
    return True


def _is_dataclass(module: ModuleModel, info: ClassInfo) -> bool:
    """The class is decorated `@dataclass` / `@dataclasses.dataclass` (with or without options)."""
    for decorator in info.node.decorators:
        expr = decorator.decorator
        name = module.names.resolve(expr.func if isinstance(expr, cst.Call) else expr)
        if name in ("dataclasses.dataclass", "pydantic.dataclasses.dataclass"):
            return True
    return False


def _spelled_names(value: Value) -> list[str] | None:
    """The names a string built from literal text around one command-line option with `choices`
    can spell: `"init_%s" % args.mode`, `f"init_{args.mode}"`, `"init_" + args.mode` with
    `--mode` one of `choices=[...]`; None for anything else."""
    node = value.node
    parts: list[str | None] = []
    picked: cst.BaseExpression | None = None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) \
            and isinstance(node.left, cst.SimpleString):
        text = string_text(node.left)
        if text is None or text.count("%s") != 1 or text.count("%") != 1:
            return None
        before, after = text.split("%s")
        parts, picked = [before, None, after], node.right
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add) \
            and isinstance(node.left, cst.SimpleString):
        text = string_text(node.left)
        if text is None:
            return None
        parts, picked = [text, None], node.right
    elif isinstance(node, cst.FormattedString):
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
            elif isinstance(part, cst.FormattedStringExpression) and picked is None \
                    and not part.format_spec and not part.conversion:
                parts.append(None)
                picked = part.expression
            else:
                return None
    if picked is None:
        return None
    choices = option_choices(value.module, picked)
    if not choices:
        return None
    return ["".join(p if p is not None else choice for p in parts) for choice in choices]
