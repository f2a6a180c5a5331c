"""Code that a certain error stops before it runs: a function that reads, at its own top level
(under no `if`, loop, `try` or `with`), an attribute its object cannot have raises
AttributeError there on every run, so nothing after that statement in the function runs (`colors =
test_loader.dataset.palette` where the project's dataset class neither defines nor sets
`palette`, and no code of the run sets it on anything).

An object "cannot have" the attribute only when every value it may hold is an instance of a
project class whose bases are project classes, `object` or torch's `Dataset` (which defines no
attributes of its own), none of which is decorated, names the attribute anywhere in its body,
defines `__getattr__`, `__getattribute__` or `__setattr__` or touches `__dict__`; and when in
the modules of the run nothing sets it on an object other than `self` (a method of another
class sets that class's instances) and no string names it (`setattr`, `getattr`, a key).
Unknown is no crash.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.lint.model.module import CallSite, ClassInfo, ModuleModel, Scope
from ddpcheck.lint.model.syntax import children, dotted, subexpressions

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

# Bases outside the project that give an instance no attributes of their own.
_PLAIN_BASES = frozenset({"object", "torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset"})
_DYNAMIC = re.compile(r"__getattr__|__getattribute__|__setattr__|__dict__|setattr\(")
_BLOCKS = (cst.If, cst.For, cst.While, cst.Try, cst.With, cst.FunctionDef, cst.ClassDef)


class Crashes:
    def __init__(self, model: Model) -> None:
        self.model = model
        self._statements: dict[int, dict[int, int]] = {}  # id(function node) → id(node) → statement index
        self._stops: dict[int, int | None] = {}  # id(function node) → index of the first crashing statement
        self._names: dict[tuple[str, frozenset[int]], bool] = {}

    def stopped_before(self, module: ModuleModel, scope: Scope, node: cst.CSTNode) -> bool:
        """Whether `node`, in function `scope` of `module`, comes after a top-level statement of
        that function that always raises AttributeError."""
        function = scope.function
        if function is None or not isinstance(function.node, cst.FunctionDef) \
                or not isinstance(function.node.body, cst.IndentedBlock):
            return False
        key = id(function.node)
        if key not in self._stops:
            self._stops[key] = self._first_stop(module, scope, function.node)
        stop = self._stops[key]
        if stop is None:
            return False
        index = self._index(function.node).get(id(node))
        return index is not None and index > stop

    def site_stopped(self, site: CallSite) -> bool:
        return self.stopped_before(site.module, site.scope, site.node)

    def _index(self, function: cst.FunctionDef) -> dict[int, int]:
        found = self._statements.get(id(function))
        if found is None:
            found = {}
            assert isinstance(function.body, cst.IndentedBlock)
            for i, statement in enumerate(function.body.body):
                for sub in subexpressions(statement):
                    found[id(sub)] = i
                found[id(statement)] = i
            self._statements[id(function)] = found
        return found

    def _first_stop(self, module: ModuleModel, scope: Scope, function: cst.FunctionDef) -> int | None:
        assert isinstance(function.body, cst.IndentedBlock)
        for i, statement in enumerate(function.body.body):
            if isinstance(statement, _BLOCKS) or not isinstance(statement, cst.SimpleStatementLine):
                continue
            for read in _reads(statement):
                if self._missing(module, scope, read):
                    return i
        return None

    def _missing(self, module: ModuleModel, scope: Scope, read: cst.Attribute) -> bool:
        attr = read.attr.value
        if attr.startswith("__"):
            return False
        graph = self.model.graph
        values = self.model.values.of(module, read.value, scope)
        if not values:
            return False
        owners: list[ModuleModel] = []
        for value in values:
            classes = graph.instances_of(value)
            if not classes:
                return False
            for owner_module, info in classes:
                for held_module, held in graph.mro(owner_module, info):
                    owners.append(held_module)
                    if attr in held.methods or attr in held.scope.assignments \
                            or f"self.{attr}" in held.scope.assignments or held.node.decorators \
                            or _DYNAMIC.search(held_module.code(held.node)) \
                            or re.search(rf"\b{re.escape(attr)}\b", held_module.code(held.node)):
                        return False  # (a decorated class, `@dataclass`, makes its own fields)
                    if not all(self._plain_or_project(held_module, held, base) for base in held.bases):
                        return False
        return self._only_read(attr, owners)

    def _plain_or_project(self, module: ModuleModel, info: ClassInfo, base: cst.BaseExpression) -> bool:
        """A base that is a project class, `object` or torch's `Dataset`."""
        name = dotted(base)
        if name is None:
            return False
        if name == "object":
            return True
        target = self.model.resolver.name(module, name, info.scope.parent)
        if target is None:
            return False
        return self.model.graph.class_at(target) is not None or (target.external or "") in _PLAIN_BASES

    def _only_read(self, attr: str, also: list[ModuleModel]) -> bool:
        """No code of the run's modules (nor of the classes' modules, `also`) sets the attribute
        on an object other than `self` (`obj.attr = ...`; `self.attr = ...` in a method of
        another class sets that class's instances), and none names it in a string (`setattr(obj,
        "attr", v)`, `getattr`, a key)."""
        # (The answer depends on the modules read as well as the name: keyed by both.)
        key = (attr, frozenset(id(m) for m in also))
        found = self._names.get(key)
        if found is None:
            name = re.escape(attr)
            written = re.compile(rf"(?<!\bself)\.{name}\s*(=[^=]|[-+*/|&]=)")
            quoted = re.compile(rf"['\"]{name}['\"]")
            found = not any(written.search(m.source) or quoted.search(m.source)
                            for m in {id(m): m for m in [*self.model.paths.modules(), *also]}.values())
            self._names[key] = found
        return found


def _reads(statement: cst.CSTNode) -> list[cst.Attribute]:
    """The attribute reads of a simple statement line, outermost first; not assignment targets,
    not inside a lambda or a comprehension (which may never run)."""
    out: list[cst.Attribute] = []
    stack: list[tuple[cst.CSTNode, bool]] = [(statement, False)]
    while stack:
        node, target = stack.pop()
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            continue
        if isinstance(node, cst.Attribute) and not target:
            out.append(node)
        if isinstance(node, (cst.AssignTarget, cst.AugAssign)):
            stack.append((node.target, True))
            stack.extend((c, False) for c in children(node) if c is not node.target)
            continue
        stack.extend((c, False) for c in children(node))
    return out
