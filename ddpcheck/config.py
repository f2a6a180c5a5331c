"""`[tool.ddpcheck]` discovery and code selection, with Ruff's semantics.

The nearest `pyproject.toml` that has a `[tool.ddpcheck]` table applies to the files below it;
`--config PATH` applies one file to everything. `extend = "../pyproject.toml"` starts from another
file's settings (its path relative to the file that names it; chains allowed, cycles refused).
Command-line selection overrides the files': `--select` replaces `select`, `--extend-select` and
`--ignore` add to theirs. Patterns (excludes, per-file-ignores) are relative to the file that
holds them, as in Ruff.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddpcheck.errors import UserError

if TYPE_CHECKING:
    from ddpcheck.describe import RuleInfo

KNOWN_KEYS = ("extend", "select", "ignore", "extend-select", "per-file-ignores", "exclude", "extend-exclude")

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".eggs", "*.egg-info",
    "build", "dist", "__pycache__", "node_modules", "site-packages", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ddpcheck_cache", ".ipynb_checkpoints", "_build",
)


@dataclass(frozen=True)
class Selection:
    """Which codes to report. Entries are codes or prefixes (`DDP0`, `DDP013`) or `ALL`."""

    select: tuple[str, ...] | None = None  # None: the rules that are on by default
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    root: Path  # the directory relative patterns are taken from
    source: Path | None = None  # the pyproject.toml (or --config file) they came from
    # Layers applied in order, Ruff's way: the file's, then the command line's. A layer's
    # `select` resets the set, then its `extend-select` adds and its `ignore` removes.
    layers: tuple[Selection, ...] = ()
    # Where each layer came from, for `ddpcheck config`: a file's path or "command line".
    origins: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    extends: tuple[Path, ...] = ()  # the files `extend` chained in, nearest first

    def enabled_codes(self, known: Mapping[str, RuleInfo]) -> frozenset[str]:
        codes = {c for c, info in known.items() if info.default_enabled}
        for sel in self.layers:
            if sel.select is not None:
                codes = {c for c in known if _matches_any(c, sel.select)}
            codes |= {c for c in known if _matches_any(c, sel.extend_select)}
            codes -= {c for c in known if _matches_any(c, sel.ignore)}
        return frozenset(codes)

    def codes_for(self, path: Path, known: Mapping[str, RuleInfo]) -> frozenset[str]:
        """The codes reported for `path`: the enabled set less its per-file ignores."""
        ignored = self.ignored_for(path)
        return frozenset(c for c in self.enabled_codes(known) if not _matches_any(c, ignored))

    def ignored_for(self, path: Path) -> tuple[str, ...]:
        """Codes `per-file-ignores` turns off for `path`."""
        rel = _relative(path, self.root)
        out: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if _glob_match(path.resolve().as_posix() if pattern.startswith("/") else rel, path.name, pattern):
                out.extend(codes)
        return tuple(out)

    def is_excluded(self, path: Path) -> bool:
        rel = _relative(path, self.root)
        for pattern in self.exclude + self.extend_exclude:
            target = path.resolve().as_posix() if pattern.startswith("/") else rel
            parts = target.split("/")
            if _glob_match(target, path.name, pattern):
                return True
            # A pattern naming a directory excludes everything below it.
            if any(fnmatch.fnmatchcase(part, pattern) for part in parts[:-1]):
                return True
            if "/" in pattern and any(fnmatch.fnmatchcase("/".join(parts[:i]), pattern.rstrip("/")) for i in range(1, len(parts))):
                return True
        return False


def _matches_any(code: str, prefixes: tuple[str, ...]) -> bool:
    return any(p == "ALL" or code.startswith(p) for p in prefixes)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _glob_match(rel: str, name: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    return fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(rel, pattern + "/*")


def _anchored(pattern: str, root: Path) -> str:
    """A pattern of an extended file, made absolute so it keeps meaning what it meant there
    (a bare name such as `build` matches anywhere and needs no anchor)."""
    if "/" not in pattern.rstrip("/") or pattern.startswith("/"):
        return pattern
    return (root.resolve() / pattern).as_posix()


def validate_codes(codes: tuple[str, ...], where: str, known: Mapping[str, RuleInfo]) -> tuple[str, ...]:
    """Normalise to upper case and refuse codes that match nothing."""
    out: list[str] = []
    for raw in codes:
        code = raw.strip().upper()
        if not code:
            continue
        if code != "ALL" and not any(k.startswith(code) for k in known):
            from ddpcheck.catalog import complete

            known = complete(known)  # a runtime check's code, perhaps
        if code != "ALL" and not any(k.startswith(code) for k in known):
            raise UserError(f"{where}: unknown rule code or prefix '{raw}'; run `ddpcheck rules` to list codes")
        out.append(code)
    return tuple(out)


def _expect_list(value: object, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: `{key}` must be a list of strings, e.g. {key} = [\"DDP0\"]")
    return tuple(value)


def load_file(path: Path, known: Mapping[str, RuleInfo], *, required_table: bool = False,
              _chain: tuple[Path, ...] = ()) -> Settings | None:
    """Settings from one TOML file (`[tool.ddpcheck]` of a pyproject.toml, or the top level of a
    ddpcheck.toml), on top of the file its `extend` names. None if a pyproject has no such table."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"{path}: cannot read config: {err.strerror or err}") from None
    import tomllib  # only when there is a config file to read

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: invalid TOML: {err}; fix the file or pass --config") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("ddpcheck")
        if table is None:
            if required_table:
                raise UserError(f"{path}: no [tool.ddpcheck] table")
            return None
        where = f"{path} [tool.ddpcheck]"
    else:
        table = data.get("tool", {}).get("ddpcheck", data)
        where = str(path)
    if not isinstance(table, dict):
        raise UserError(f"{where}: must be a table")
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise UserError(f"{where}: unknown key '{unknown[0]}'; valid keys are {', '.join(KNOWN_KEYS)}")
    select = table.get("select")
    selection = Selection(
        select=None if select is None else validate_codes(_expect_list(select, "select", where), f"{where} select", known),
        extend_select=validate_codes(_expect_list(table.get("extend-select", []), "extend-select", where), f"{where} extend-select", known),
        ignore=validate_codes(_expect_list(table.get("ignore", []), "ignore", where), f"{where} ignore", known),
    )
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise UserError(f"{where}: `per-file-ignores` must be a table of \"glob\" = [\"CODE\", ...]")
    per_file = tuple(
        (pattern, validate_codes(_expect_list(codes, f"per-file-ignores.{pattern}", where), f"{where} per-file-ignores", known))
        for pattern, codes in pfi.items()
    )
    base = _extended(path, table, where, known, _chain) if "extend" in table else None
    settings = Settings(root=path.parent, source=path, layers=(selection,), origins=(str(path),),
                        per_file_ignores=per_file)
    if base is not None:
        # Ruff's merge: selection layers stack; per-file-ignores and exclude are replaced when
        # this file sets them, else inherited; extend-exclude accumulates.
        settings = replace(
            settings,
            layers=base.layers + settings.layers,
            origins=base.origins + settings.origins,
            per_file_ignores=per_file if "per-file-ignores" in table else tuple(
                (_anchored(p, base.root), codes) for p, codes in base.per_file_ignores),
            exclude=tuple(_anchored(p, base.root) for p in base.exclude),
            extend_exclude=tuple(_anchored(p, base.root) for p in base.extend_exclude),
            extends=(base.source,) + base.extends if base.source else base.extends,
        )
    if "exclude" in table:
        settings = replace(settings, exclude=_expect_list(table["exclude"], "exclude", where))
    if "extend-exclude" in table:
        settings = replace(settings, extend_exclude=settings.extend_exclude
                           + _expect_list(table["extend-exclude"], "extend-exclude", where))
    return settings


def _extended(path: Path, table: Mapping[str, object], where: str, known: Mapping[str, RuleInfo], chain: tuple[Path, ...]) -> Settings:
    """The settings of the file `extend` names, relative to `path`'s folder."""
    value = table["extend"]
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: `extend` must be a path to a TOML file, e.g. extend = \"../pyproject.toml\"")
    import os

    target = (path.parent / os.path.expandvars(os.path.expanduser(value))).resolve()
    chain = chain + (path.resolve(),)
    if target in chain:
        loop = " -> ".join(str(p) for p in chain[chain.index(target):] + (target,))
        raise UserError(f"{where}: `extend` makes a cycle ({loop}); remove one of the `extend` keys")
    if not target.is_file():
        raise UserError(f"{where}: `extend = \"{value}\"`: no such file ({target})")
    base = load_file(target, known, required_table=True, _chain=chain)
    assert base is not None  # required_table
    return base


class SettingsResolver:
    """Finds the settings for each file: `--config`, else the nearest pyproject.toml with a
    [tool.ddpcheck] table above the file, else the one above the cwd, else defaults. CLI
    overrides are applied on top. Directory lookups are cached for the run."""

    def __init__(self, known: Mapping[str, RuleInfo], *, config: Path | None = None, overrides: Selection | None = None,
                 cwd: Path | None = None, exclude: tuple[str, ...] | None = None,
                 extend_exclude: tuple[str, ...] = ()) -> None:
        self.known = known
        self.overrides = overrides or Selection()
        self.cwd = (cwd or Path.cwd()).resolve()
        self.cli_exclude = exclude
        self.cli_extend_exclude = extend_exclude
        self._fixed: Settings | None = None
        if config is not None:
            if not config.is_file():
                raise UserError(f"--config {config}: no such file")
            loaded = load_file(config, known, required_table=True)
            assert loaded is not None  # required_table
            self._fixed = self._finish(loaded)
        self._by_dir: dict[Path, Settings | None] = {}
        self._default = self._finish(Settings(root=self.cwd))

    def for_path(self, path: Path) -> Settings:
        if self._fixed is not None:
            return self._fixed
        found = self._nearest(path.resolve().parent if not path.is_dir() else path.resolve())
        if found is None:
            found = self._nearest(self.cwd)
        return found or self._default

    def _nearest(self, directory: Path) -> Settings | None:
        chain = []
        current = directory
        result = None
        while True:
            if current in self._by_dir:
                result = self._by_dir[current]
                break
            chain.append(current)
            candidate = current / "pyproject.toml"
            if candidate.is_file():
                loaded = load_file(candidate, self.known)
                if loaded is not None:
                    result = self._finish(loaded)
                    break
            if current.parent == current:
                break
            current = current.parent
        for d in chain:
            self._by_dir[d] = result
        return result

    def _finish(self, settings: Settings) -> Settings:
        settings = replace(settings, layers=settings.layers + (self.overrides,),
                           origins=settings.origins + ("command line",))
        if self.cli_exclude is not None:
            settings = replace(settings, exclude=self.cli_exclude)
        if self.cli_extend_exclude:
            settings = replace(settings, extend_exclude=settings.extend_exclude + self.cli_extend_exclude)
        return settings


def describe(settings: Settings, known: Mapping[str, RuleInfo], path: Path) -> str:
    """The settings that apply to `path`, for `ddpcheck config` / `lint --show-settings`: one
    `key: value` line each, every selection step labelled with where it came from."""
    def origin(name: str) -> str:
        if name == "command line":
            return name
        if settings.source is not None and name == str(settings.source):
            return "config"
        return name  # an extended file: its path

    layers = [(origin(name), sel) for name, sel in zip(settings.origins, settings.layers)]

    def selection(sel: Selection) -> str:
        parts = []
        if sel.select is not None:
            parts.append(f"select {', '.join(sel.select) or '(none)'}")
        if sel.extend_select:
            parts.append(f"extend-select {', '.join(sel.extend_select)}")
        if sel.ignore:
            parts.append(f"ignore {', '.join(sel.ignore)}")
        return "; ".join(parts) or "-"

    file_ignores = settings.ignored_for(path)
    enabled = sorted(c for c in settings.enabled_codes(known) if not _matches_any(c, file_ignores))
    # The steps in the order they apply (Ruff's): a later `select` replaces what came before.
    rows = [
        ("file", str(path)),
        ("config", (f"{settings.source} [tool.ddpcheck]" if settings.source and settings.source.name == "pyproject.toml"
                    else str(settings.source or "(none found: defaults)"))
         + "".join(f", extends {p}" for p in settings.extends)),
        ("root", str(settings.root)),
        ("selection", "the rules that are on by default, then the steps below"),
        *((f"  from {origin}", selection(sel)) for origin, sel in layers),
        ("per-file-ignores", "; ".join(f"{p} = {', '.join(c)}" for p, c in settings.per_file_ignores) or "-"),
        ("ignored for this file", ", ".join(file_ignores) or "-"),
        ("exclude", ", ".join(settings.exclude) + (" (default)" if settings.exclude == DEFAULT_EXCLUDE else "")),
        ("extend-exclude", ", ".join(settings.extend_exclude) or "-"),
        ("excluded", "yes" if settings.is_excluded(path) else "no"),
        (f"enabled rules ({len(enabled)})", ", ".join(enabled) or "(none)"),
    ]
    width = max(len(key) for key, _ in rows) + 1
    return "\n".join(f"{key + ':':<{width}} {value}" for key, value in rows)
