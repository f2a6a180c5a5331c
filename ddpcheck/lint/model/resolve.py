"""Qualified-name resolution across the project: what a name used in a module really is.

`DS` after `from torch.utils.data import DistributedSampler as DS`, `tud.DataLoader`, a re-export
through a project package's `__init__`, a name from `from common import *` followed into project
modules, `DDP = torch.nn.parallel.DistributedDataParallel` at module level: each resolves to a
Target — an API outside the project by its canonical name, or a function, class, module or value
of a project module. Other modules are read through their indexes (their text), never parsed here.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite, ModuleModel, Scope, Target
from ddpcheck.lint.model.project import Project, locate, resolved_path
from ddpcheck.lint.model.syntax import dotted

_MAX_DEPTH = 8


def _lookup(project: Project, path: Path, rest: str, seen: frozenset[tuple[Path, str]], depth: int) -> Target | None:
    """`rest` (a dotted name) inside the project module at `path`."""
    if depth <= 0 or (path, rest) in seen:
        return None
    seen = seen | {(path, rest)}
    if not rest:
        return Target(None, path, "", "module")
    index = project.index(path)
    if index is None:
        return None
    head, _, tail = rest.partition(".")
    if head in index.functions:
        return Target(None, path, rest, "member" if tail else "function")
    if head in index.classes:
        return Target(None, path, rest, "member" if tail else "class")
    origin = index.aliases.get(head)
    if origin is not None:
        return _origin(project, path, f"{origin}.{tail}" if tail else origin, seen, depth - 1)
    for star in reversed(index.stars):
        found = _through_star(project, path, star, rest, seen, depth - 1)
        if found is not None:
            return found
    if head in index.assigned:
        return Target(None, path, rest, "value" if not tail else "member")
    return None


def _through_star(project: Project, importer: Path, star: str, rest: str,
                  seen: frozenset[tuple[Path, str]], depth: int) -> Target | None:
    where = locate(importer, star)
    if where is not None:
        path, inner = where
        return _lookup(project, path, f"{inner}.{rest}" if inner else rest, seen, depth)
    if star.startswith("."):
        return None
    name = api.canonical(f"{star}.{rest}")
    return Target(name) if name in api.KNOWN else None


def _origin(project: Project, importer: Path, origin: str, seen: frozenset[tuple[Path, str]], depth: int) -> Target | None:
    """What `origin` (a dotted name as `importer` imports it) is."""
    where = locate(importer, origin)
    if where is None:
        return None if origin.startswith(".") else Target(api.canonical(origin))
    path, rest = where
    if not rest and "." in origin.lstrip("."):
        # `from pkg import launch` where pkg/__init__.py does `from .launch import launch`: the
        # package's attribute (the function) hides the submodule of the same name.
        parent, _, name = origin.rpartition(".")
        above = locate(importer, parent)
        if above is not None and not above[1] and above[0].name == "__init__.py":
            found = _lookup(project, above[0], name, seen, depth)
            if found is not None and found.kind != "module":
                return found
    return _lookup(project, path, rest, seen, depth)


class Resolver:
    """Resolves names used in one module (memoised per module)."""

    def __init__(self, project: Project | None) -> None:
        self.project = project

    def name(self, module: ModuleModel, name: str, scope: Scope | None = None) -> Target | None:
        """What the dotted `name`, as written in `module` (inside `scope`), refers to."""
        root = name.partition(".")[0]
        if scope is not None and scope.kind != "module":
            # A name bound in a function (a local or a parameter) is not the module's global.
            inner = next((s for s in scope.chain() if s.kind != "class" and root in s.assignments), None)
            if inner is not None and inner.parent is not None:
                return None
        memo: dict[str, Target | None] = module.memo.setdefault("resolve", {})
        if name in memo:
            return memo[name]
        memo[name] = None  # a module-level alias cycle resolves to nothing
        found = self._name(module, name)
        memo[name] = found
        return found

    def _name(self, module: ModuleModel, name: str) -> Target | None:
        path = resolved_path(module.path)
        origin = module.names.origin(name)
        if origin is not None:
            if path is None or self.project is None:
                return None if origin.startswith(".") else Target(api.canonical(origin))
            found = _origin(self.project, path, origin, frozenset(), _MAX_DEPTH)
            if found is None:
                for other in module.names.alternatives(name):
                    found = _origin(self.project, path, other, frozenset(), _MAX_DEPTH)
                    if found is not None:
                        break
            return found
        root, _, tail = name.partition(".")
        if root in module.functions or root in module.classes:
            return Target(None, path, name, "member" if tail else ("class" if root in module.classes else "function"))
        values = module.module_scope.assignments.get(root)
        if values:
            # `f().attr` is an Attribute too, but names nothing: it is a value, never an alias.
            aliases = {dotted(v) for v in values if isinstance(v, (cst.Name, cst.Attribute))}
            alias = aliases.pop() if len(aliases) == 1 else None
            if alias is not None and alias != root and all(isinstance(v, (cst.Name, cst.Attribute)) for v in values):
                # `DDP = torch.nn.parallel.DistributedDataParallel`: an alias made by assignment.
                return self.name(module, f"{alias}.{tail}" if tail else alias)
            return Target(None, path, name, "member" if tail else "value")
        if path is not None and self.project is not None:
            for star in reversed(module.names.stars):
                found = _through_star(self.project, path, star, name, frozenset(), _MAX_DEPTH)
                if found is not None:
                    return found
        return None

    def in_module(self, path: Path, name: str) -> Target | None:
        """What `name`, written at the top level of the project module at `path`, refers to."""
        if self.project is None:
            return None
        found = _lookup(self.project, path, name, frozenset(), _MAX_DEPTH)
        if found is None and "." in name:
            # `torch.utils.data.Sampler` in a module that did `import torch`: an outside name.
            index = self.project.index(path)
            head = name.partition(".")[0]
            if index is not None and index.aliases.get(head) == head:
                return _origin(self.project, path, name, frozenset(), _MAX_DEPTH)
        return found

    def qualname(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope | None = None) -> str | None:
        """The canonical name of an outside API that `expr` names, else None."""
        name = dotted(expr)
        if name is None:
            return None
        target = self.name(module, name, scope)
        return target.external if target is not None else None

    def _rebound_project_module(self, module: ModuleModel, call: CallSite) -> bool:
        """Whether `call.dotted`'s first name is an imported project module that an assignment
        rebinds, and the rest names nothing in that module."""
        root, dot, _ = (call.dotted or "").partition(".")
        if not dot or not call.scope.lookup(root):
            return False
        origin = module.names.origin(root)
        path = resolved_path(module.path)
        if origin is None or path is None or self.project is None:
            return False
        return locate(path, origin) is not None

    def resolve_calls(self, module: ModuleModel) -> None:
        """Give every call of `module` its resolved callee (`CallSite.qualname` and `.target`)."""
        for call in module.calls:
            if call.dotted is None:
                continue
            target = self.name(module, call.dotted, call.scope)
            if target is None:
                if call.qualname is not None and self._rebound_project_module(module, call):
                    # `import lib.trainer as trainer` then `trainer = trainer.Trainer(cfg)`:
                    # `trainer.run()` is a method of the instance the name now holds, not a name
                    # in the module; the value flow follows it (graph.py).
                    call.qualname = None
                continue
            call.target = target
            if target.external is not None:
                call.qualname = target.external
