"""The other Python files of the linted file's project, run or not: what the project does with
what the run writes. A checkpoint the training script saves is read back by an inference script
the training script never imports, or by a single-GPU twin of it; only a look at the whole
project sees that reader.

Files are listed below the linted file's folder (the folder above its top package when it sits
in one), skipping hidden folders, virtual environments and installed packages, in a bounded
walk. They are read as text (through the run's Project, so each once per run); callers
filter on the text before they ask for a file's model.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ddpcheck.lint.model.project import _outside_packages, resolved_path

_MAX_FILES = 400  # a walk over a monorepo stops here: what it found so far is what is asked
_MAX_DEPTH = 6
_SKIPPED = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages", "build", "dist",
                      "venv", "env", "third_party", "thirdparty", "external", "vendor"})


@lru_cache(maxsize=256)
def _listed(top: Path) -> tuple[Path, ...]:
    found: list[Path] = []
    base_depth = len(top.parts)
    for dirpath, dirnames, filenames in os.walk(top):
        folder = Path(dirpath)
        if len(folder.parts) - base_depth >= _MAX_DEPTH:
            dirnames[:] = []
        else:
            dirnames[:] = sorted(
                d for d in dirnames
                if not d.startswith(".") and d.lower() not in _SKIPPED and not (folder / d / "pyvenv.cfg").exists()
            )
        for name in sorted(filenames):
            if name.endswith(".py"):
                found.append(folder / name)
                if len(found) >= _MAX_FILES:
                    return tuple(found)
    return tuple(found)


def project_files(path: str) -> tuple[Path, ...]:
    """The Python files beside the linted file `path` and below its folder — from the folder
    above its top package when it sits in one — itself included; nothing for a file inside
    installed packages or without a path (stdin). A script's folder is its project: in a
    repository of many projects, the folders beside it belong to others."""
    where = resolved_path(path)
    if where is None or not _outside_packages(where):
        return ()
    top = where.parent
    for _ in range(_MAX_DEPTH):
        if not (top / "__init__.py").is_file() or top.parent == top:
            break
        top = top.parent
    return _listed(top)
