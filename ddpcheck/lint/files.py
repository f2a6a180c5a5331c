"""Which files to lint: walk the given paths, skip the usual noise, what settings exclude and what
`.gitignore` ignores (asked of git itself, so its rules hold exactly)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ddpcheck.config import SettingsResolver
from ddpcheck.findings import ToolError
from ddpcheck.tool_codes import UnreadableFile


@dataclass(frozen=True)
class Discovery:
    files: tuple[Path, ...]
    errors: tuple[ToolError, ...]  # a missing path, a directory without Python files


def discover(paths: list[str], resolver: SettingsResolver, *, force_exclude: bool = False) -> Discovery:
    files: list[Path] = []
    errors: list[ToolError] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            errors.append(ToolError(raw, "no such file or directory", UnreadableFile.code))
            continue
        if path.is_file():
            # Named explicitly: linted even if excluded, unless --force-exclude (pre-commit's case).
            if force_exclude and (resolver.for_path(path).is_excluded(path) or _git_ignored([path])):
                continue
            if path.resolve() not in seen:
                seen.add(path.resolve())
                files.append(path)
            continue
        found = [p for p in _walk(path, resolver) if p.resolve() not in seen]
        ignored = set(_git_ignored(found)) if found else set()
        found = [p for p in found if p not in ignored]
        if not found:
            errors.append(ToolError(raw, "no Python files to lint in this directory"))
            continue
        for p in found:
            seen.add(p.resolve())
            files.append(p)
    return Discovery(tuple(files), tuple(errors))


def _walk(top: Path, resolver: SettingsResolver) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(top):
        base = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            sub = base / d
            if resolver.for_path(sub).is_excluded(sub) or (sub / "pyvenv.cfg").exists():
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.endswith((".py", ".pyi")):
                p = base / name
                if not resolver.for_path(p).is_excluded(p):
                    yield p


def _git_ignored(paths: list[Path]) -> list[Path]:
    """The paths git would ignore (one `git check-ignore` call; nothing when git or a repo is absent)."""
    if not paths:
        return []
    import shutil
    import subprocess  # only here: naming one file (a pre-commit run) never pays for it

    git = shutil.which("git")
    if git is None:
        return []
    by_cwd: dict[Path, list[Path]] = {}
    for p in paths:
        by_cwd.setdefault(p.resolve().parent, []).append(p)
    # One call from a common directory is enough: git resolves each path to its own repository.
    cwd = Path(os.path.commonpath([str(d) for d in by_cwd]))
    try:
        out = subprocess.run(
            [git, "check-ignore", "--stdin", "-z"],
            input="\0".join(str(p.resolve()) for p in paths) + "\0",
            capture_output=True, text=True, cwd=cwd, timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode not in (0, 1):
        return []  # not a git repository, or git refused: nothing is ignored
    ignored = {Path(s) for s in out.stdout.split("\0") if s}
    return [p for p in paths if p.resolve() in ignored]
