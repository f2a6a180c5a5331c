"""The linted file's project: where its modules are, their indexes and models, loaded lazily and
kept for the whole run.

Import roots, in order: the file's folder, the root of the package it sits in (the folder above
the topmost `__init__.py`), the project root (nearest folder with pyproject.toml, setup.py,
setup.cfg or .git, at most 6 levels up) and its `src/`; then, for a name none of them has, the
folder above the importing file's own top package of that name (a module in `libs/training/`
importing `libs.support.utils` runs only with the folder above `libs/` on the path), then the
folders the project adds to `sys.path` itself (model/syspath.py), then the folder one or two
levels up whose script imports the file's folder as a package (`exp/exp_main.py`, imported as
`exp.exp_main` by `run.py` beside `exp/`, reads `from utils.tools import ...` from there); last,
for a name still not found, the projects of their own just below the project root
(`COIGAN/setup.py` installs `COIGAN/COIGAN/`, which `scripts/train.py` imports). Never site-packages: ddpcheck
learns what *the project's* modules do, and reads them as text (it never imports them). A name
resolves to the project's file whenever one exists — `datasets`, `utils`, or a package named like
a published library when linting inside that library — and to an outside library only when none
does.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Callable

import libcst as cst

from ddpcheck.lint.model.index import ModuleIndex, read_index
from ddpcheck.lint.model.parse import PARSE_ERRORS, parse_module
from ddpcheck.lint.model.syspath import added_roots

# The module path of a `from` line, the rest of an `import` line.
_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]*)|import[ \t]+([^\n]*))", re.MULTILINE)

if TYPE_CHECKING:
    from ddpcheck.lint.model.module import ModuleModel

_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_MAX_MODULES = 512  # module models kept per run (memory bound on huge trees)
Stamp = tuple[int, int]


def _outside_packages(path: Path) -> bool:
    return not any(part in ("site-packages", "dist-packages") for part in path.parts)


@lru_cache(maxsize=1024)
def _project_root(folder: Path) -> Path | None:
    """The nearest folder (at most 6 levels up) with a project marker."""
    for ancestor in [folder, *folder.parents][:6]:
        if any((ancestor / m).exists() for m in _MARKERS):
            return ancestor
    return None


@lru_cache(maxsize=1024)
def import_roots(folder: Path) -> tuple[Path, ...]:
    roots = [folder]
    top = folder
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    roots.append(top)
    project = _project_root(folder)
    if project is not None:
        roots += [project, project / "src"]
    unique: list[Path] = []
    for root in roots:
        if root not in unique and root.is_dir() and _outside_packages(root):
            unique.append(root)
    return tuple(unique)


@lru_cache(maxsize=1024)
def _top_names(root: Path) -> frozenset[str]:
    """Module and package names directly in `root`: a name outside this set cannot be found
    below it (one directory listing instead of a stat per lookup)."""
    names = set()
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(".py"):
                    names.add(name[:-3])
                elif "." not in name:
                    names.add(name)
    except OSError:
        pass
    return frozenset(names)


@lru_cache(maxsize=8192)
def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def locate(importer: Path, dotted: str) -> tuple[Path, str] | None:
    """The project file that defines `dotted` (as the importing file spells it) and the rest of
    the name inside it: `utils.misc.init_distributed_mode` → (…/utils/misc.py,
    "init_distributed_mode"); `pkg` → (…/pkg/__init__.py, ""); relative names (`.dist.setup`)
    resolve from the importing file's package."""
    folder = _parent(importer)
    if dotted.startswith("."):
        level = len(dotted) - len(dotted.lstrip("."))
        rest = dotted[level:]
        base = folder
        for _ in range(level - 1):
            base = base.parent
        if not rest:
            init = base / "__init__.py"
            return (init, "") if init.is_file() else None
        return _split(rest, (base,))
    return _locate_absolute(folder, dotted)


@lru_cache(maxsize=4096)
def _parent(path: Path) -> Path:
    """One folder object per file: `_locate_absolute`'s cache hashes it, and a Path computes its
    hash once."""
    return path.parent


# Per importing folder and name: every script of a run asks for `torch`, `os`, ... from the same
# folder, and each answer is read from the folder lists and file checks cached above.
@lru_cache(maxsize=8192)
def _locate_absolute(folder: Path, dotted: str) -> tuple[Path, str] | None:
    head = dotted.split(".", 1)[0]
    roots = tuple(r for r in import_roots(folder) if head in _top_names(r))
    if not roots:
        # A module inside `libs/training/` that imports `libs.support.utils`: the folder above
        # `libs/` must be on the path for the program to import itself (a namespace package
        # without `__init__.py`, put on the path by whatever script starts the run).
        roots = tuple(a.parent for a in [folder, *folder.parents][:6]
                      if a.name == head and a.parent != a and _outside_packages(a))
    if not roots:  # not on the ordinary path: perhaps in a folder the project adds to sys.path
        roots = tuple(r for r in _added_roots(folder) if head in _top_names(r))
    if not roots:
        roots = tuple(r for r, package in _folders_above(folder)
                      if head in _top_names(r) and _imports_package(r, package))
    if not roots:
        # `pkg/cli/train.py` importing `engine.loop` from its sibling package `pkg/engine/`: the
        # script is started with the folder above its own on the path (`PYTHONPATH=. python
        # cli/train.py`). A package (with `__init__.py`) there, inside the project, only.
        above = _package_top(folder).parent
        project = _project_root(folder)
        if above != folder and (project is None or above.is_relative_to(project)) and _outside_packages(above) \
                and head in _top_names(above) and (above / head / "__init__.py").is_file():
            roots = (above,)
    found = _split(dotted, roots) if roots else None
    if found is None:
        # `COIGAN/setup.py` installs the package `COIGAN/COIGAN/`: a script of the repository
        # imports `COIGAN.utils` from there, not from the folder `COIGAN/` at the top.
        nested = tuple(r for r in _nested_projects(folder) if head in _top_names(r))
        found = _split(dotted, nested) if nested else None
    return found


def _package_top(folder: Path) -> Path:
    """The top folder of the package `folder` is in (`folder` itself outside any package)."""
    top = folder
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    return top


@lru_cache(maxsize=1024)
def _nested_projects(folder: Path) -> tuple[Path, ...]:
    """The folders just below the project's root that are projects of their own (a setup.py,
    setup.cfg or pyproject.toml of their own), and their `src/`: the packages installed from
    them are importable by the repository's scripts."""
    project = _project_root(folder)
    if project is None or not _outside_packages(project):
        return ()
    found: list[Path] = []
    try:
        with os.scandir(project) as entries:
            folders = sorted(Path(e.path) for e in entries if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return ()
    for sub in folders:
        if any((sub / m).is_file() for m in _MARKERS[:3]):
            found += [p for p in (sub, sub / "src") if p.is_dir()]
    return tuple(found)


@lru_cache(maxsize=1024)
def _folders_above(folder: Path) -> tuple[tuple[Path, str], ...]:
    """The folders a script that imports the modules of `folder` may start from, each with the
    package name it would import them under: a module in a plain folder (`exp/exp_main.py`, no
    `__init__.py`) that a script in the folder above imports as `exp.exp_main` runs with that
    folder on `sys.path`, so the module's own `from utils.tools import ...` reads that folder's
    `utils/`. One or two levels above the top of `folder`'s package, never above the project's
    root. A folder counts only where one of its modules imports that package (`_imports_package`:
    a script of `examples/` run by itself does not see the folder above)."""
    top = folder
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    project = _project_root(folder)
    found: list[tuple[Path, str]] = []
    package = top.name
    ancestor = top
    for _ in range(2):
        if ancestor.parent == ancestor:
            break
        below, ancestor = ancestor, ancestor.parent
        if (project is not None and not ancestor.is_relative_to(project)) or not _outside_packages(ancestor):
            break
        if below is not top:
            package = f"{below.name}.{package}"
        found.append((ancestor, package))
    return tuple(found)


_FILES_READ = 64  # modules read per folder for the imports of a package below it
_BYTES_READ = 200_000


@lru_cache(maxsize=1024)
def _imports_package(folder: Path, package: str) -> bool:
    """A module directly in `folder` imports `package` (`from exp.exp_main import Exp`,
    `import exp.exp_main`)."""
    pattern = re.compile(rb"^\s*(?:from|import)\s+" + re.escape(package.encode()) + rb"[.\s]", re.M)
    try:
        with os.scandir(folder) as entries:
            files = sorted(e.path for e in entries if e.name.endswith(".py") and e.is_file())
    except OSError:
        return False
    for name in files[:_FILES_READ]:
        try:
            with open(name, "rb") as handle:
                raw = handle.read(_BYTES_READ)
        except OSError:
            continue
        if pattern.search(raw):
            return True
    return False


@lru_cache(maxsize=1024)
def _added_roots(folder: Path) -> tuple[Path, ...]:
    """Folders that modules in `folder` or the folders above it add to `sys.path`: up to the
    project root (or, without one, the top of the package `folder` is in), at most 3 levels up."""
    ordinary = import_roots(folder)
    if not ordinary:  # inside site-packages
        return ()
    top = _project_root(folder) or ordinary[-1]
    found: list[Path] = []
    for ancestor in [folder, *folder.parents][:4]:
        for root in added_roots(ancestor):
            if root not in found:
                found.append(root)
        if ancestor == top:
            break
    return tuple(found)


def _split(dotted_name: str, roots: tuple[Path, ...]) -> tuple[Path, str] | None:
    parts = dotted_name.split(".")
    # Longest module prefix first: `pkg.mod.Class.method` → pkg/mod.py, "Class.method".
    for cut in range(len(parts), 0, -1):
        module, rest = ".".join(parts[:cut]), ".".join(parts[cut:])
        for root in roots:
            found = _module_file(root, module)
            if found is not None:
                return found, rest
    return None


# The working directory while one file is linted (see Project.hold): nothing changes it in
# between, and asking the system at every resolution costs about 1 % of a lint's CPU.
_held_cwd: str | None = None


def resolved_path(path: str) -> Path | None:
    if not path or path == "-":
        return None
    try:
        # Asked for the same few paths thousands of times per file (name resolution starts from
        # the module's path); a relative path is kept per working directory.
        return _resolved(path, "" if os.path.isabs(path) else (_held_cwd or os.getcwd()))
    except (OSError, ValueError):
        return None


@lru_cache(maxsize=4096)
def _resolved(path: str, cwd: str) -> Path:
    return Path(os.path.normpath(os.path.join(cwd, path)))  # os.path.abspath, given the directory


class Project:
    """One per lint run: the project modules read so far — their indexes (from the text) and
    their models (parsed and walked once, when a question first needs a function body) — checked
    against each file's size and mtime."""

    def __init__(self) -> None:
        self._texts: dict[Path, tuple[Stamp, str | None]] = {}
        self._indexes: dict[Path, ModuleIndex | None] = {}
        self._models: dict[Path, tuple[Stamp, ModuleModel | None]] = {}
        self._linted: dict[Path, ModuleModel] = {}
        self._passes: dict[tuple[Path, Callable[[str], bool]], tuple[Stamp, bool]] = {}
        self._import_words: dict[Path, tuple[Stamp, frozenset[str]]] = {}
        self._answers: dict[Hashable, tuple[tuple[Stamp, ...], object]] = {}
        # While one file is linted (see hold): each module's size and mtime, read once. Rules
        # ask about every file of the project for each file they lint: a stat per question cost
        # more than the questions.
        self._held: dict[Path, tuple[Stamp, str | None]] | None = None
        self.parsed = 0  # module models built from a parse of a helper (tests and benchmarks read it)
        self.dropped = 0  # module models let go of (replaced or past _MAX_MODULES): the run's garbage
        self.build: Callable[[str, str, cst.Module, Project], ModuleModel] | None = None

    # --- text and index ----------------------------------------------------------------------
    def hold(self, held: bool) -> None:
        """Check each module's size and mtime once until `hold(False)` (one file's lint) instead
        of at every question; the working directory too."""
        global _held_cwd
        self._held = {} if held else None
        try:
            _held_cwd = os.getcwd() if held else None
        except OSError:
            _held_cwd = None

    def _text(self, path: Path) -> tuple[Stamp, str | None]:
        held = self._held
        if held is None:
            return self._read(path)
        found = held.get(path)
        if found is None:
            found = held[path] = self._read(path)
        return found

    def _read(self, path: Path) -> tuple[Stamp, str | None]:
        try:
            stat = path.stat()
        except OSError:
            return (0, 0), None
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = self._texts.get(path)
        if cached is not None and cached[0] == stamp:
            return cached
        try:
            text: str | None = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
        self._texts[path] = (stamp, text)
        self._indexes.pop(path, None)
        return stamp, text

    def text(self, path: Path) -> str | None:
        """The module's text (None if unreadable or not UTF-8)."""
        return self._text(path)[1]

    def answer(self, key: Hashable, paths: Sequence[Path], compute: Callable[[], bool]) -> bool:
        """`compute()`, asked once while the texts of `paths` stay as they are: a question about
        a whole folder (the scripts beside the one linted) that each file linted there would ask
        again."""
        stamps = tuple(self._text(path)[0] for path in paths)
        known = self._answers.get(key)
        if known is not None and known[0] == stamps:
            return bool(known[1])
        result = compute()
        self._answers[key] = (stamps, result)
        return result

    def passes(self, path: Path, test: Callable[[str], bool]) -> bool:
        """`test(text)` of the module's text, asked once per run and text: rules search every
        file of the project for a few words, once for each file they lint."""
        stamp, text = self._text(path)
        if text is None:
            return False
        key = (path, test)
        known = self._passes.get(key)
        if known is not None and known[0] == stamp:
            return known[1]
        result = bool(test(text))
        self._passes[key] = (stamp, result)
        return result

    def import_words(self, path: Path) -> frozenset[str]:
        """The words of the module's import lines (`from a.b import c` gives a and b, `import
        x, y as z` gives x, y, as and z), read once per run and text: each file linted in a
        folder asks whether another module of the folder imports it."""
        stamp, text = self._text(path)
        known = self._import_words.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        words: set[str] = set()
        for match in _IMPORT_LINE.finditer(text or ""):
            words.update(re.findall(r"\w+", match.group(1) or match.group(2) or ""))
        found = frozenset(words)
        self._import_words[path] = (stamp, found)
        return found

    def index(self, path: Path) -> ModuleIndex | None:
        """The module's top-level names, from its text (no parse)."""
        linted = self._linted.get(path)
        if linted is not None:
            return linted.own_index()
        _, text = self._text(path)
        if path in self._indexes:
            return self._indexes[path]
        model = self._fresh_model(path)
        index = model.own_index() if model is not None else (read_index(text) if text is not None else None)
        self._indexes[path] = index
        return index

    def linting(self, model: ModuleModel) -> None:
        """`model` is the file being linted: its own text (maybe unsaved, or from stdin) is what
        other modules see of it while it is."""
        path = resolved_path(model.path)
        self._linted.clear()
        if path is not None:
            self._linted[path] = model

    # --- models ------------------------------------------------------------------------------
    def _fresh_model(self, path: Path) -> ModuleModel | None:
        cached = self._models.get(path)
        if cached is None or cached[1] is None:
            return None
        stamp, _ = self._text(path)
        return cached[1] if cached[0] == stamp else None

    def model(self, path: Path) -> ModuleModel | None:
        """The module's model, parsed and walked once per run (None if unreadable or invalid)."""
        linted = self._linted.get(path)
        if linted is not None:
            return linted
        stamp, text = self._text(path)
        cached = self._models.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        model = None
        if text is not None and self.build is not None:
            try:
                tree = parse_module(text)
            except PARSE_ERRORS:
                tree = None
            if tree is not None:
                model = self.build(str(path), text, tree, self)
                self.parsed += 1
        self._store(path, stamp, model)
        return model

    def parsed_tree(self, path: str, source: str) -> cst.Module | None:
        """The tree of a file already read as a helper, if its text is `source`."""
        where = resolved_path(path)
        cached = self._models.get(where) if where is not None else None
        if cached is not None and cached[1] is not None and cached[1].source == source:
            return cached[1].tree
        return None

    def remember(self, model: ModuleModel) -> None:
        """Keep a linted file's model: later imports of that file are answered without a parse."""
        path = resolved_path(model.path)
        if path is None:
            return
        stamp, text = self._text(path)
        if text == model.source:
            self._store(path, stamp, model)

    def _store(self, path: Path, stamp: Stamp, model: ModuleModel | None) -> None:
        if self._models.pop(path, None) is not None:
            self.dropped += 1
        self._models[path] = (stamp, model)
        self._indexes.pop(path, None)
        while len(self._models) > _MAX_MODULES:
            del self._models[next(iter(self._models))]
            self.dropped += 1
