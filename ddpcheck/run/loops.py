"""Loops in the user's source, to tell "a rank left the training loop" from "a rank made an extra
call inside it". Reads the file with the standard library's `ast` (never imports or runs it).
Torch-free."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class Loop:
    path: str
    start: int  # the line of `for`/`while`
    end: int  # its last line (the else clause included)
    exits: tuple[int, ...]  # lines of the `break`s that leave this loop and the `return`s inside it

    def __contains__(self, line: int) -> bool:
        return self.start <= line <= self.end


@lru_cache(maxsize=32)
def _tree(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _exits(loop: ast.AST) -> tuple[int, ...]:
    found: list[int] = []

    def walk(node: ast.AST, own: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Break) and own:
                found.append(child.lineno)
            elif isinstance(child, ast.Return):
                found.append(child.lineno)
            walk(child, own and not isinstance(child, _LOOPS))

    walk(loop, True)
    return tuple(sorted(found))


def enclosing_loop(path: str, line: int) -> Loop | None:
    """The innermost loop of the function around `line` that contains it (None outside any loop)."""
    tree = _tree(path)
    if tree is None:
        return None
    best: ast.For | ast.AsyncFor | ast.While | None = None
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                best = None  # a loop outside the function does not hold the function's lines
            elif isinstance(child, _LOOPS):
                best = child
            stack.append(child)
    if best is None:
        return None
    return Loop(path, best.lineno, best.end_lineno or best.lineno, _exits(best))
