"""Which files can matter, decided from their text before anything is parsed.

Every rule is about torch: a finding needs a call that resolves to `torch...` through the file's
imports, or a module of the project that leads there (lint/model/ follows imports). So a file
can only have findings if the text "torch" appears in it or in a project module it imports,
directly or through other project modules. Everything else (most files of a mixed project) is
not parsed with libcst; the runner only has CPython's parser check it for syntax errors.

The same scan gives each file's project imports, which the cache (lint/cache.py) folds into its
key: a helper's edit can change the findings of the files that import it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Callable

from ddpcheck.lint.model.syspath import added_roots

MARKER = "torch"
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<module>\.*[\w.]*)[ \t]+import[ \t]*(?P<names>\([^)]*\)|[^\n;#]*)"
    r"|import[ \t]+(?P<plain>[^\n;#]+))",
    re.MULTILINE,
)
_NOT_LOCAL = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "libcst", "typing_extensions"}
_MAX_UP = 6  # how many directories above a file its absolute imports are looked for


class ImportScan:
    """Per run: the project modules each file imports (transitively) and whether torch is reachable."""

    def __init__(self, read: Callable[[Path], str | None]) -> None:
        self._read = read  # path → text (None when unreadable); the runner passes what it has read
        self._direct: dict[Path, tuple[Path, ...]] = {}
        self._found: dict[tuple[Path, str], tuple[Path, ...]] = {}
        self._closure: dict[Path, tuple[Path, ...]] = {}

    def relevant(self, path: Path, source: str) -> bool:
        if MARKER in source:
            return True
        for dep in self.dependencies(path, source):
            text = self._read(dep)
            if text is not None and MARKER in text:
                return True
        return False

    def dependencies(self, path: Path, source: str | None = None) -> tuple[Path, ...]:
        """The project modules `path` imports, directly or through each other, sorted."""
        path = absolute(path)
        cached = self._closure.get(path)
        if cached is not None:
            return cached
        seen: set[Path] = set()
        todo = [(path, source)]
        while todo:
            current, text = todo.pop()
            for dep in self._direct_imports(current, text):
                if dep not in seen and dep != path:
                    seen.add(dep)
                    todo.append((dep, None))
        result = tuple(sorted(seen))
        self._closure[path] = result
        return result

    def _direct_imports(self, path: Path, text: str | None) -> tuple[Path, ...]:
        cached = self._direct.get(path)
        if cached is not None:
            return cached
        if text is None:
            text = self._read(path)
        found: list[Path] = []
        if text:
            for name in _imported_names(text):
                found.extend(self._locate(path, name))
        result = tuple(dict.fromkeys(found))
        self._direct[path] = result
        return result

    def _locate(self, path: Path, name: str) -> tuple[Path, ...]:
        """Project files a dotted import may load: each package `__init__.py` on the way and the
        module itself, looked up from the importing file's directory and the ones above it."""
        dots = len(name) - len(name.lstrip("."))
        parts = [p for p in name[dots:].split(".") if p]
        if dots:
            base = path.parent
            for _ in range(dots - 1):
                base = base.parent
            bases = [base]
        else:
            if not parts or parts[0] in _NOT_LOCAL:
                return ()
            bases = [path.parent, *list(path.parent.parents)[: _MAX_UP - 1]]
            # Folders the project puts on `sys.path` itself (`sys.path.append('src')`), which the
            # model follows too: the prefilter must see the same modules the lint will.
            bases += [root for folder in bases[:4] for root in added_roots(folder) if root not in bases]
        out: list[Path] = []
        for base in bases:
            key = (base, ".".join(parts))
            hit = self._found.get(key)
            if hit is None:
                hit = _files_for(base, parts)
                self._found[key] = hit
            out.extend(hit)
        return tuple(out)


def absolute(path: Path) -> Path:
    """An absolute, normalised path without touching the disk (Path.resolve stats every part)."""
    return Path(os.path.abspath(path))


def _files_for(base: Path, parts: list[str]) -> tuple[Path, ...]:
    out = []
    if not parts:
        init = base / "__init__.py"
        return (init,) if init.is_file() else ()
    current = base
    for part in parts:
        module = current / f"{part}.py"
        package = current / part
        if module.is_file():
            out.append(module)
            break
        init = package / "__init__.py"
        if init.is_file():
            out.append(init)
            current = package
            continue
        if package.is_dir():  # a namespace package: keep looking below it
            current = package
            continue
        break
    return tuple(out)


def _imported_names(text: str) -> list[str]:
    """Dotted names an import statement may load, from the text (`from a import b` may load `a.b`)."""
    if "import" not in text:
        return []
    names: list[str] = []
    for m in _IMPORT.finditer(text):
        if m.group("plain") is not None:
            for item in m.group("plain").split(","):
                item = item.split(" as ")[0].strip().rstrip("\\").strip()
                if item:
                    names.append(item)
            continue
        module = m.group("module")
        names.append(module)
        listed = m.group("names").strip().strip("()")
        for item in listed.replace("\\", " ").split(","):
            item = item.split(" as ")[0].strip()
            if item and item != "*" and item.isidentifier():
                names.append(f"{module}{item}" if module.endswith(".") else f"{module}.{item}")
    return names
