"""Folders a project adds to `sys.path` itself, so its imports resolve the way they do when it runs.

Research code often keeps its package in a folder that is not on the import path and adds it at
start-up, in the script or in a small module the script imports first (`import _init_paths`):

    this_dir = osp.dirname(__file__)
    sys.path.insert(0, osp.join(this_dir, "..", "lib"))
    sys.path.append(str(Path(__file__).resolve().parents[1]))

`added_roots(folder)` reads the modules of a folder that mention `sys.path` (with Python's `ast`,
no libcst) and evaluates the path expressions they pass to `sys.path.insert/append/extend` and
`site.addsitedir`: string constants, `__file__`, module-level names bound once, `os.path`'s
dirname/abspath/realpath/normpath/join, `pathlib.Path(...)`, `.parent`, `.parents[n]`,
`.resolve()`/`.absolute()`, `/` and `str()`. Anything else is unknown and adds nothing. A relative
string is read from the module's folder (the usual working directory of such scripts). A plain
relative string on its own (`sys.path.insert(0, 'subtools/pytorch')`) is relative to whatever
folder the script is started from, which is often not its own: it is then also read from the
folders above the module, and, where the first parts name the clone itself as the user's working
copy calls it (`subtools/` for a repository cloned under another name), with them left off —
the first that exists is the one taken. Only folders that exist and lie outside site-packages count. Used only when an import is found in no
ordinary root, so a project that never touches `sys.path` pays one folder listing per run.
"""

from __future__ import annotations

import ast
import os
from functools import lru_cache
from pathlib import Path

_MAX_FILES = 64  # modules read per folder
_MAX_BYTES = 200_000
_PATH_FUNCS = {"dirname", "abspath", "realpath", "normpath", "join"}
_ADDERS = {"insert", "append", "extend"}
_OS_DIRS = {"pardir": "..", "curdir": "."}


class _Unknown(Exception):
    pass


def _value(node: ast.expr, names: dict[str, ast.expr], file: Path, depth: int = 0) -> str:
    """The string (or path) `node` evaluates to; `_Unknown` when it cannot be told."""
    if depth > 12:
        raise _Unknown

    def again(inner: ast.expr) -> str:
        return _value(inner, names, file, depth + 1)

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        value = node.value
        return value if os.path.isabs(value) else os.path.join(str(file.parent), value)
    if isinstance(node, ast.Name):
        if node.id == "__file__":
            return str(file)
        bound = names.get(node.id)
        if bound is None:
            raise _Unknown
        return again(bound)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        args = node.args
        if name in ("resolve", "absolute") and isinstance(func, ast.Attribute) and not args:
            return os.path.abspath(again(func.value))
        if name in ("str", "Path", "PurePath") and len(args) == 1:
            return again(args[0])
        if name in _PATH_FUNCS and args:
            values = [_relative_part(a, names, file, depth) if i else again(a) for i, a in enumerate(args)]
            if name == "join":
                return os.path.join(*values)
            if len(values) != 1:
                raise _Unknown
            return os.path.dirname(values[0]) if name == "dirname" else os.path.abspath(values[0])
        raise _Unknown
    # `file_path.split("Demo")[0]`: the path up to the first folder of that name (the project's
    # root, seen from a script inside it); str.split's own reading of the text.
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == 0 \
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
            and node.value.func.attr == "split" and len(node.value.args) == 1 and not node.value.keywords:
        separator = node.value.args[0]
        if isinstance(separator, ast.Constant) and isinstance(separator.value, str) and separator.value:
            return again(node.value.func.value).split(separator.value)[0]
        raise _Unknown
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        return os.path.dirname(os.path.abspath(again(node.value)))
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        index = node.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, int) and 0 <= index.value < 8:
            path = os.path.abspath(again(node.value.value))
            for _ in range(index.value + 1):
                path = os.path.dirname(path)
            return path
        raise _Unknown
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return os.path.join(again(node.left), _relative_part(node.right, names, file, depth))
    raise _Unknown


def _relative_part(node: ast.expr, names: dict[str, ast.expr], file: Path, depth: int) -> str:
    """A later argument of `join` or the right of `/`: a plain string stays relative."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    # `os.path.join(CUR_DIR, os.pardir)`: the parent directory, spelled by the os module.
    if isinstance(node, ast.Attribute) and node.attr in _OS_DIRS and isinstance(node.value, ast.Name) \
            and node.value.id == "os":
        return _OS_DIRS[node.attr]
    return _value(node, names, file, depth + 1)


def _single_bindings(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names assigned exactly once (a name bound twice is unknown)."""
    seen: dict[str, ast.expr] = {}
    twice: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                if target.id in seen:
                    twice.add(target.id)
                seen[target.id] = statement.value
    return {k: v for k, v in seen.items() if k not in twice}


def _adder_arguments(node: ast.AST) -> list[ast.expr]:
    """The path arguments of `sys.path.insert/append/extend(...)` or `site.addsitedir(...)`."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return []
    func, args = node.func, node.args
    owner = func.value
    if func.attr in _ADDERS and isinstance(owner, ast.Attribute) and owner.attr == "path" \
            and isinstance(owner.value, ast.Name) and owner.value.id == "sys":
        chosen = args[1:2] if func.attr == "insert" else args[:1]
        if func.attr == "extend" and chosen and isinstance(chosen[0], (ast.List, ast.Tuple)):
            return list(chosen[0].elts)
        return list(chosen)
    if func.attr == "addsitedir" and isinstance(owner, ast.Name) and owner.id == "site":
        return list(args[:1])
    return []


def _added(text: str, file: Path) -> list[str]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    names = _single_bindings(tree)
    # A module-level helper that adds its parameter (`def add_path(path): sys.path.insert(0,
    # path)`): the arguments of its calls are the paths.
    helpers: dict[str, int] = {}
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef):
            params = [a.arg for a in statement.args.args]
            for inner in ast.walk(statement):
                for arg in _adder_arguments(inner):
                    if isinstance(arg, ast.Name) and arg.id in params:
                        helpers[statement.name] = params.index(arg.id)
    paths: list[ast.expr] = []
    for node in ast.walk(tree):
        paths += _adder_arguments(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers:
            index = helpers[node.func.id]
            if index < len(node.args):
                paths.append(node.args[index])
    out: list[str] = []
    for arg in paths:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value \
                and not os.path.isabs(arg.value):
            out += _working_dir_candidates(arg.value, file)[:1]
            continue
        try:
            out.append(os.path.normpath(_value(arg, names, file)))
        except (_Unknown, TypeError, ValueError):
            continue
    return out


_UPWARD = 4  # folders above a module tried as the working directory of a relative entry


def _working_dir_candidates(relative: str, file: Path) -> list[str]:
    """Existing folders a relative `sys.path` entry can name: from the module's folder, then from
    each folder above it; then the same with leading parts left off (the name the clone has on
    its author's machine), never down to nothing."""
    parts = [p for p in relative.replace("\\", "/").split("/") if p not in ("", ".")]
    bases = [file.parent, *file.parent.parents][:_UPWARD + 1]
    found: list[str] = []
    for drop in range(0, max(len(parts), 1)):
        if drop and (parts[drop - 1] == ".." or drop >= len(parts)):
            break
        tail = parts[drop:]
        for base in bases:
            candidate = os.path.normpath(os.path.join(str(base), *tail))
            if os.path.isdir(candidate) and candidate not in found:
                found.append(candidate)
        if found:
            break
    return found


@lru_cache(maxsize=256)
def added_roots(folder: Path) -> tuple[Path, ...]:
    """Existing folders the modules in `folder` add to `sys.path`, in the order they add them."""
    found: list[Path] = []
    try:
        with os.scandir(folder) as entries:
            files = sorted(e.path for e in entries if e.name.endswith(".py") and e.is_file())
    except OSError:
        return ()
    for name in files[:_MAX_FILES]:
        try:
            with open(name, "rb") as handle:
                raw = handle.read(_MAX_BYTES + 1)
        except OSError:
            continue
        if len(raw) > _MAX_BYTES or b"sys.path" not in raw and b"addsitedir" not in raw:
            continue
        for added in _added(raw.decode("utf-8", "replace"), Path(name)):
            root = Path(added)
            if root not in found and root != folder and root.is_dir() \
                    and not any(p in ("site-packages", "dist-packages") for p in root.parts):
                found.append(root)
    return tuple(found)
