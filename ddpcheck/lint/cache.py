"""The lint cache: a file's findings, kept under a key of everything they depend on.

Key: ddpcheck's version and a stamp of the lint code itself (size and modification time of every
module under ddpcheck/lint and of the finding model: a rule changed in a checkout, at the same
version, must not serve the old rule's findings), the rules enabled for the file (and whether syntax errors are
reported), the path as reported, the file's bytes and the bytes of the project modules it
imports (helpers can change its findings; see lint/prefilter.py). One small JSON file per key
in `.ddpcheck_cache/` next to the nearest `pyproject.toml` above the working directory (else in
the working directory), with a `.gitignore` and a `CACHEDIR.TAG` so tools leave it alone.

Safe under concurrent runs: an entry is written to a temporary file and renamed into place
(atomic), so a reader sees a whole entry or none; two runs writing the same key write the same
bytes. Anything unreadable, truncated or of another shape is a miss and is rewritten. A cache
that cannot be written (read-only checkout) is simply not written.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ddpcheck import __version__
from ddpcheck.findings import Applicability, Edit, Finding, Fix, Related, Severity

if TYPE_CHECKING:
    from ddpcheck.describe import RuleInfo

DIRNAME = ".ddpcheck_cache"
FORMAT = 3  # bump when the entry layout or meaning changes (3: findings before noqa)
_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This directory is ddpcheck's cache; see https://bford.info/cachedir/\n"


def cache_root(cwd: Path | None = None) -> Path:
    """`.ddpcheck_cache` beside the nearest pyproject.toml at or above `cwd`, else in `cwd`."""
    override = os.environ.get("DDPCHECK_CACHE_DIR")
    if override:
        return Path(override)
    start = (cwd or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").is_file():
            return directory / DIRNAME
    return start / DIRNAME


def key(display: str, data: bytes, codes: Iterable[str], syntax: bool, deps: Iterable[bytes]) -> str:
    h = hashlib.blake2b(digest_size=20)
    for part in (f"ddpcheck {__version__}", f"code {lint_code_stamp()}", f"format {FORMAT}", ",".join(sorted(codes)), f"syntax {syntax}", display):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    h.update(hashlib.blake2b(data, digest_size=20).digest())
    for dep in deps:
        h.update(hashlib.blake2b(dep, digest_size=20).digest())
    return h.hexdigest()


_PACKAGE = Path(__file__).resolve().parent.parent  # ddpcheck/


def _files_stamp(files: list[Path], salt: str = "") -> str:
    """A short hash of the size and mtime of `files` (relative to the package)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(salt.encode())
    for f in sorted(files):
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f.relative_to(_PACKAGE)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


@lru_cache(maxsize=1)
def lint_code_stamp() -> str:
    """Size and mtime of every module the findings depend on; a few hundred stat calls, once per run."""
    files = [_PACKAGE / "findings.py"]
    for directory, _, names in os.walk(_PACKAGE / "lint"):
        files += [Path(directory, n) for n in names if n.endswith(".py")]
    return _files_stamp(files)


class LintCache:
    def __init__(self, root: Path) -> None:
        self.dir = root / f"lint-{__version__}"
        self.hits = 0
        self.misses = 0
        self._ready = False

    def get(self, entry: str) -> list[Finding] | None:
        try:
            raw = (self.dir / f"{entry}.json").read_bytes()
            findings = [_load(item) for item in json.loads(raw)]
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            self.misses += 1
            return None
        self.hits += 1
        return findings

    def put(self, entry: str, findings: list[Finding]) -> None:
        try:
            data = json.dumps([_dump(f) for f in findings], separators=(",", ":")).encode()
        except (TypeError, ValueError):
            return  # details that JSON cannot hold: such a file is linted every time
        try:
            self._prepare()
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{entry}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, self.dir / f"{entry}.json")
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError:
            pass  # no cache beats a failed lint

    def _prepare(self) -> None:
        if self._ready:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        top = self.dir.parent
        for name, text in ((".gitignore", "# Created by ddpcheck\n*\n"), ("CACHEDIR.TAG", _TAG)):
            marker = top / name
            if not marker.exists():
                try:
                    fd, tmp = tempfile.mkstemp(dir=top, prefix=f".{name}.", suffix=".tmp")
                    with os.fdopen(fd, "w") as fh:
                        fh.write(text)
                    os.replace(tmp, marker)
                except OSError:
                    pass
        self._ready = True


def _dump(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code": f.code, "name": f.name, "message": f.message, "severity": f.severity.value,
        "path": f.path, "line": f.line, "column": f.column, "end_line": f.end_line,
        "end_column": f.end_column, "hint": f.hint, "ranks": list(f.ranks), "details": f.details,
        "related": [[r.path, r.line, r.column, r.message] for r in f.related],
        "fix": None,
    }
    if f.fix is not None:
        out["fix"] = {
            "description": f.fix.description,
            "applicability": f.fix.applicability.value,
            "edits": [[e.start, e.end, e.content] for e in f.fix.edits],
        }
    return out


def _load(d: dict[str, Any]) -> Finding:
    fix = d["fix"]
    return Finding(
        code=d["code"], name=d["name"], message=d["message"], severity=Severity(d["severity"]),
        path=d["path"], line=d["line"], column=d["column"], end_line=d["end_line"],
        end_column=d["end_column"], hint=d["hint"], ranks=tuple(d["ranks"]), details=d["details"],
        related=tuple(Related(str(p), int(line), int(col), str(m)) for p, line, col, m in d["related"]),
        fix=None if fix is None else Fix(
            fix["description"],
            tuple(Edit(int(s), int(e), str(c)) for s, e, c in fix["edits"]),
            Applicability(fix["applicability"]),
        ),
    )


# --- the rule catalog, without importing the rules -------------------------------------------
# Knowing which codes exist and which are on by default means importing every rule module, and
# with them libcst (the largest part of start-up). A run whose files all come from the cache
# needs nothing else from libcst, so the catalog is kept too, under a key of ddpcheck's version
# and the size and mtime of every module that defines codes.

def catalog(root: Path) -> dict[str, RuleInfo]:
    """`catalog.all_rules()`, from a snapshot when the modules that define it are unchanged."""
    from ddpcheck.catalog import RuleInfo

    stamp = _catalog_stamp()
    path = root / f"lint-{__version__}" / f"_catalog-{stamp}.json"
    try:
        items = json.loads(path.read_bytes())
        return {d["code"]: RuleInfo(**{**d, "severity": Severity(d["severity"])}) for d in items}
    except (OSError, ValueError, TypeError, KeyError):
        pass
    from ddpcheck.catalog import all_rules

    known = all_rules()
    try:
        data = json.dumps([{**vars(i), "severity": i.severity.value} for i in known.values()]).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".catalog.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except (OSError, TypeError):
        pass
    return known


def _catalog_stamp() -> str:
    package = _PACKAGE
    places = [package / "lint" / "rules", package / "run" / "checks"]
    files = [package / "catalog.py", package / "describe.py", package / "lint" / "rule.py", package / "tool_codes.py",
             package / "run" / "catalog.py"]
    for place in places:
        try:
            files += [Path(e.path) for e in os.scandir(place) if e.name.endswith(".py")]
        except OSError:
            pass
    return _files_stamp(files, salt=__version__)
