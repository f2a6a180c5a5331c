"""Loops in the user's source, to tell "a rank left the training loop" from "a rank made an extra
call inside it". Reads the file with the standard library's `ast` (never imports or runs it).
Torch-free."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

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


def _innermost(path: str, line: int, pick: Callable[[ast.AST], bool]) -> ast.AST | None:
    """The innermost node of the function around `line` that holds it and that `pick` accepts (None
    when there is none, or the file cannot be read): what lies outside the function does not decide
    what runs inside it."""
    tree = _tree(path)
    if tree is None:
        return None
    best: ast.AST | None = None
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                best = None
            elif pick(child):
                best = child
            stack.append(child)
    return best


def enclosing_loop(path: str, line: int) -> Loop | None:
    """The innermost loop of the function around `line` that contains it (None outside any loop)."""
    best = _innermost(path, line, lambda node: isinstance(node, _LOOPS))
    if not isinstance(best, _LOOPS):
        return None
    return Loop(path, best.lineno, best.end_lineno or best.lineno, _exits(best))


# A condition on the rank: `rank == 0`, `dist.get_rank() == 0`, `args.local_rank in (-1, 0)`,
# `is_main_process()`, `master_process`, `os.environ["RANK"] == "0"`.
_RANK_WORDS = re.compile(r"rank|is_main|main_process|is_master|master_process", re.IGNORECASE)


@dataclass(frozen=True)
class Guard:
    """An `if` on the rank around a line: only some ranks run what it holds."""

    path: str
    line: int  # the line of the `if`
    test: str  # its condition, as written (unparsed)


def rank_guard(path: str, line: int) -> Guard | None:
    """The innermost `if` of the function around `line` whose condition is on the rank and whose
    body or else-branch holds `line` (None when there is none, or the file cannot be read)."""
    def pick(node: ast.AST) -> bool:  # the condition's own lines are not under it
        return isinstance(node, ast.If) and not node.test.lineno <= line <= (node.test.end_lineno or 0) \
            and _on_rank(node.test)

    best = _innermost(path, line, pick)
    if not isinstance(best, ast.If):
        return None
    return Guard(path, best.lineno, ast.unparse(best.test))


def _ints(node: ast.expr) -> list[int]:
    """The whole-number constants `node` is or holds (`0`, `-1`, `(-1, 0)`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return [node.value]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [-n for n in _ints(node.operand)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _ints(e)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isdigit():
        return [int(node.value)]  # os.environ["RANK"] == "0"
    return []


def _on_rank(test: ast.expr) -> bool:
    """Does this condition pick some ranks? `rank == 0`, `get_rank() != 0`, `local_rank in [-1, 0]`,
    `is_main_process()`, `not master_process` do; `local_rank != -1` (is this a distributed run at
    all?) does not: it holds on every rank of one."""
    if isinstance(test, ast.BoolOp):
        return any(_on_rank(v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _on_rank(test.operand)
    if isinstance(test, ast.Compare):
        operands = [test.left, *test.comparators]
        if not any(_RANK_WORDS.search(ast.unparse(o)) for o in operands):
            return False
        return any(n >= 0 for o in operands for n in _ints(o))
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        return bool(_RANK_WORDS.search(ast.unparse(test)))
    return False
