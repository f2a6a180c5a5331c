"""Resolve names through imports and aliases, so a rule asks "is this torch.distributed.barrier?".

Deliberately lighter than libcst's QualifiedNameProvider (which costs ~10x the parse): one dict of
alias → dotted origin, filled as import statements are met in source order.
"""

from __future__ import annotations

import libcst as cst

# Deep module paths users may import from, mapped to the public name rules match on.
_CANONICAL_PREFIXES = (
    ("torch.utils.data.distributed.", "torch.utils.data."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
    ("torch.utils.data.dataset.", "torch.utils.data."),
    ("torch.utils.data.sampler.", "torch.utils.data."),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.nn.parallel.data_parallel.", "torch.nn.parallel."),
    ("torch.distributed.distributed_c10d.", "torch.distributed."),
    ("torch.nn.modules.batchnorm.", "torch.nn."),
    ("torch.cuda.amp.", "torch.amp."),
)
_CANONICAL_NAMES = {
    "torch.nn.DataParallel": "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
}


def canonical(name: str) -> str:
    for deep, public in _CANONICAL_PREFIXES:
        if name.startswith(deep):
            name = public + name[len(deep):]
            break
    if name.startswith("torch.optim.") and name.count(".") == 3:
        # torch.optim.sgd.SGD -> torch.optim.SGD
        parts = name.split(".")
        if parts[2].islower() and parts[3][:1].isupper():
            name = "torch.optim." + parts[3]
    return _CANONICAL_NAMES.get(name, name)


def dotted(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


def last_name(expr: cst.BaseExpression) -> str | None:
    """`c` for `a.b.c` (the name a call or attribute chain ends in), else None."""
    name = dotted(expr)
    return name.rsplit(".", 1)[-1] if name else None


def _module_name(node: cst.BaseExpression | None) -> str:
    return dotted(node) or "" if node is not None else ""


class ImportMap:
    """Local name → the dotted name it was imported as."""

    __slots__ = ("aliases", "modules")

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()  # every module imported from, dotted

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _module_name(alias.name)
                self.modules.add(full)
                if alias.asname is not None:
                    self.aliases[dotted(alias.asname.name) or full] = full
                else:
                    # `import torch.distributed` binds `torch`; the full chain then resolves itself.
                    root = full.split(".", 1)[0]
                    self.aliases.setdefault(root, root)
            return
        module = ("." * len(node.relative)) + _module_name(node.module)
        self.modules.add(module)
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = _module_name(alias.name)
            local = dotted(alias.asname.name) if alias.asname is not None else name
            # `from . import utils` → ".utils" (not "..utils", which would mean the parent package)
            self.aliases[local] = (module + name if module.endswith(".") else f"{module}.{name}") if module else name

    def resolve(self, expr: cst.BaseExpression) -> str | None:
        """Canonical dotted name of an imported thing, or None if the root is not an import."""
        name = dotted(expr)
        if name is None:
            return None
        root, _, rest = name.partition(".")
        origin = self.aliases.get(root)
        if origin is None:
            return None
        return canonical(f"{origin}.{rest}" if rest else origin)

    def imports_from(self, prefix: str) -> bool:
        return any(m == prefix or m.startswith(prefix + ".") for m in self.modules) or any(
            v == prefix or v.startswith(prefix + ".") for v in self.aliases.values()
        )

    def imports_name(self, qualname: str) -> bool:
        return any(canonical(v) == qualname for v in self.aliases.values())
