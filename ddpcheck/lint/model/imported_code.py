"""The part of a project module that a `from module import name, ...` brings into a run: the
statements that run at import (less its `if __name__ == "__main__":` block) and the top-level
definitions the imported names reach, by name, inside the module, and those it puts in a
registry (`@register_model`), which a configuration reaches by name. A helper module imported for
two functions does not bring in the evaluation script its own main block runs."""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=512)
def code_reached(text: str, names: frozenset[str]) -> str:
    """The code of `text` that importing `names` from it reaches; the whole text where it does
    not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text
    lines = text.splitlines(keepends=True)

    def source(node: ast.stmt) -> str:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        text = "".join(lines[first - 1:node.end_lineno])
        # The file's last statement may end without a new line: it must not run into the next.
        return text if text.endswith("\n") else text + "\n"

    definitions: dict[str, list[ast.stmt]] = {}
    kept: list[ast.stmt] = []
    wanted = set(names)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definitions.setdefault(node.name, []).append(node)
            # A definition put in a registry (`@register_model`, `@MODELS.register_module()`)
            # is reached by a name from a configuration.
            if any("regist" in ast.unparse(d).lower() for d in node.decorator_list):
                wanted.add(node.name)
        elif not _main_guard(node):
            # Statements that run at import, and the definitions they call or export
            # (`model = build()`, `__all__ = ["Net"]`).
            kept.append(node)
            wanted |= _names(node)
    reached: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in reached or name not in definitions:
            continue
        reached.add(name)
        for node in definitions[name]:
            kept.append(node)
            wanted |= _names(node) - reached
    # In the module's own order, whatever order the names were reached in: the readers of this
    # text match patterns across statements, and the same project must read the same every run.
    kept.sort(key=lambda node: node.lineno)
    return "".join(source(node) for node in kept)


def _names(node: ast.AST) -> set[str]:
    """The names `node` reads (comments and docstrings name nothing), and the strings it holds
    that could name a definition (`__all__`, a registry)."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier():
            found.add(sub.value)
    return found


def _main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


@lru_cache(maxsize=512)
def _name_uses(text: str) -> dict[str, frozenset[str] | None]:
    """Each name the code of `text` reads, with the attributes it reads on it (`split.make`), or
    None where the name is read bare too (passed on, `getattr(split, name)`)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    attributes: dict[str, set[str]] = {}
    bare: set[str] = set()
    seen: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attributes.setdefault(node.value.id, set()).add(node.attr)
            seen.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in seen:
            bare.add(node.id)
    out: dict[str, frozenset[str] | None] = {name: frozenset(attrs) for name, attrs in attributes.items()}
    for name in bare:
        out[name] = None
    return out


def module_attributes_used(text: str, name: str) -> frozenset[str] | None:
    """The attributes the code of `text` reads on the module it imports whole as `name` (`from
    utils import split`, then `split.make_split(...)`): what of that module the importer can
    reach, besides its import-time statements; empty where the code never reads the name; None
    where it reads it bare as well (or the text does not parse): then the whole module."""
    uses = _name_uses(text)
    if not uses and text.strip():
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            return None
    return uses.get(name, frozenset())
