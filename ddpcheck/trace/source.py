"""Map the paths a rank's frames name (on the cluster) to the user's files here (`--source`), and
find the function around a line, with the stdlib's `ast` (no lint internals needed for that)."""

from __future__ import annotations

import ast
import os
from functools import lru_cache
from pathlib import PurePosixPath, PureWindowsPath


def locate(frame_path: str, source: str) -> str | None:
    """The local file a frame names: the path itself when it lies under `source`, else the longest
    tail of it that exists under `source` (the job ran in /scratch/job-123/, the checkout is here)."""
    root = os.path.abspath(source)
    if os.path.isabs(frame_path) and os.path.isfile(frame_path):
        here = os.path.abspath(frame_path)
        if here.startswith(root + os.sep):
            return here
    pure = PureWindowsPath(frame_path) if "\\" in frame_path else PurePosixPath(frame_path)
    parts = [p for p in pure.parts if p not in ("/", "\\") and not p.endswith(":\\")]
    for i in range(len(parts)):
        candidate = os.path.join(root, *parts[i:])
        if os.path.isfile(candidate):
            return candidate
    return None


@lru_cache(maxsize=256)
def _functions(path: str) -> tuple[tuple[str, int, int], ...]:
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple((n.name, n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def enclosing(path: str, line: int) -> tuple[int, int] | None:
    """The lines of the innermost function around `line`; None at module level."""
    spans = [(start, end) for _, start, end in _functions(path) if start <= line <= end]
    return min(spans, key=lambda s: s[1] - s[0]) if spans else None


def line_text(path: str, line: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, 1):
                if number == line:
                    return text.strip()
    except OSError:
        pass
    return ""
