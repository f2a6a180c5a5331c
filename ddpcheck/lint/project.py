"""Find the modules of the linted file's own project: the import roots and the file behind a name.

Roots, in order: the file's folder, the root of the package it sits in (the folder above the
topmost `__init__.py`), the project root (nearest folder with pyproject.toml, setup.py,
setup.cfg or .git, at most 6 levels up) and its `src/`. Never site-packages: ddpcheck learns
what *the project's* helpers do, and reads them as text (it never imports them).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Top-level names that are never project modules: looking them up would only cost stat calls.
_NOT_PROJECT = frozenset(sys.stdlib_module_names) | {
    "torch", "torchvision", "torchaudio", "numpy", "np", "tqdm", "transformers", "timm",
    "accelerate", "apex", "PIL", "cv2", "yaml", "wandb", "tensorboard", "scipy", "pandas",
    "sklearn", "matplotlib", "einops", "deepspeed", "lightning", "pytorch_lightning", "datasets",
}


def _outside_packages(path: Path) -> bool:
    return not any(part in ("site-packages", "dist-packages") for part in path.parts)


@lru_cache(maxsize=1024)
def import_roots(folder: Path) -> tuple[Path, ...]:
    roots = [folder]
    top = folder
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    roots.append(top)
    for ancestor in [folder, *folder.parents][:6]:
        if any((ancestor / m).exists() for m in _MARKERS):
            roots += [ancestor, ancestor / "src"]
            break
    unique: list[Path] = []
    for root in roots:
        if root not in unique and root.is_dir() and _outside_packages(root):
            unique.append(root)
    return tuple(unique)


@lru_cache(maxsize=4096)
def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def locate(file: Path, qualname: str) -> tuple[Path, str] | None:
    """The project file that defines `qualname` (as the linted file's imports spell it) and the
    function's name inside it: `utils.misc.init_distributed_mode` → (…/utils/misc.py,
    "init_distributed_mode"); relative names (`.dist.setup`) resolve from the file's package."""
    folder = file.parent
    if qualname.startswith("."):
        level = len(qualname) - len(qualname.lstrip("."))
        rest = qualname[level:]
        base = folder
        for _ in range(level - 1):
            base = base.parent
        return _split(base, rest, (base,))
    if qualname.split(".", 1)[0] in _NOT_PROJECT:
        return None
    return _split(folder, qualname, import_roots(folder))


def _split(anchor: Path, dotted_name: str, roots: tuple[Path, ...]) -> tuple[Path, str] | None:
    parts = dotted_name.split(".")
    # Longest module prefix first: `pkg.mod.Class.method` → pkg/mod.py, "Class.method".
    for cut in range(len(parts) - 1, 0, -1):
        module, function = ".".join(parts[:cut]), ".".join(parts[cut:])
        for root in roots:
            found = _module_file(root, module)
            if found is not None:
                return found, function
    return None
