"""A module's imports, as it reads them: local name → the dotted name it was imported as."""

from __future__ import annotations

import libcst as cst

from ddpcheck.lint.model.api import canonical
from ddpcheck.lint.model.index import join_import
from ddpcheck.lint.model.syntax import dotted


def _module_name(node: cst.BaseExpression | None) -> str:
    return dotted(node) or "" if node is not None else ""


class ImportMap:
    """Filled as import statements are met, in source order (Python's own binding order)."""

    __slots__ = ("aliases", "modules", "stars", "others")

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        # Every origin a name was imported as (function-level imports in different branches:
        # `import models.wideresnet as models` / `import models.resnext as models`).
        self.others: dict[str, list[str]] = {}
        self.modules: set[str] = set()  # every module imported from, dotted
        self.stars: list[str] = []  # modules imported with `*`, in order

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _module_name(alias.name)
                self.modules.add(full)
                if alias.asname is not None:
                    local = dotted(alias.asname.name) or full
                    self.aliases[local] = full
                    self.others.setdefault(local, []).append(full)
                else:
                    # `import torch.distributed` binds `torch`; the full chain then resolves itself.
                    # It rebinds a name imported before from elsewhere (`from torchvision import
                    # datasets`, then `import datasets`: the project's module from there on).
                    root = full.split(".", 1)[0]
                    before = self.aliases.get(root)
                    if before != root:
                        self.aliases[root] = root
                        if before is not None:
                            self.others.setdefault(root, [before]).append(root)
            return
        module = ("." * len(node.relative)) + _module_name(node.module)
        self.modules.add(module)
        if isinstance(node.names, cst.ImportStar):
            self.stars.append(module)
            return
        for alias in node.names:
            name = _module_name(alias.name)
            local = (dotted(alias.asname.name) if alias.asname is not None else name) or ""
            if local:
                self.aliases[local] = join_import(module, name)
                self.others.setdefault(local, []).append(self.aliases[local])

    def origin(self, name: str) -> str | None:
        """The imported dotted name behind `name` (`dist.barrier` → torch.distributed.barrier)."""
        root, _, rest = name.partition(".")
        origin = self.aliases.get(root)
        if origin is None:
            return None
        return f"{origin}.{rest}" if rest else origin

    def alternatives(self, name: str) -> list[str]:
        """Other origins `name` was imported as, besides `origin(name)`."""
        root, _, rest = name.partition(".")
        found = []
        for origin in self.others.get(root, ())[:-1]:
            found.append(f"{origin}.{rest}" if rest else origin)
        return found

    def resolve(self, expr: cst.BaseExpression) -> str | None:
        """Canonical dotted name of an imported thing, or None if the root is not an import."""
        name = dotted(expr)
        if name is None:
            return None
        origin = self.origin(name)
        return canonical(origin) if origin is not None else None

    def imports_from(self, prefix: str) -> bool:
        return any(m == prefix or m.startswith(prefix + ".") for m in self.modules) or any(
            v == prefix or v.startswith(prefix + ".") for v in self.aliases.values()
        )
