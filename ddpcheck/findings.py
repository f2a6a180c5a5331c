"""The one vocabulary shared by `lint` and `run`: every user-visible result is a Finding."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How bad a finding is. `error`: the job crashes, hangs or trains wrongly; `warning`: likely
    wrong or wasteful; `info`: worth knowing, often a judgement call."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Applicability(str, Enum):
    """Ruff's split: safe fixes keep behaviour, unsafe ones may change it and need `--unsafe-fixes`."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] (character offsets into the file's text) with `content`."""

    start: int
    end: int
    content: str


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]
    applicability: Applicability = Applicability.SAFE


@dataclass(frozen=True)
class Related:
    """Another place that explains a finding: a call on the way to it, where the value came from."""

    path: str
    line: int
    column: int
    message: str


@dataclass(frozen=True)
class Finding:
    """One problem found in one place.

    Lines and columns are 1-based (what editors and `grep -n` show). A runtime finding may have no
    source location (path None) and names the ranks it concerns instead.
    """

    code: str
    name: str
    message: str
    severity: Severity
    path: str | None = None
    line: int | None = None
    column: int | None = None
    end_line: int | None = None
    end_column: int | None = None
    fix: Fix | None = None
    hint: str | None = None
    ranks: tuple[int, ...] = ()
    related: tuple[Related, ...] = ()  # e.g. the calls that make a helper's line run on every rank
    # Free-form, JSON-serialisable details (runtime figures, example indices, ...).
    details: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def location(self) -> str:
        if self.path is None:
            return "<run>"
        if self.line is None:
            return self.path
        return f"{self.path}:{self.line}:{self.column or 1}"

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path or "", self.line or 0, self.column or 0, self.code)

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape (see docs/usage.md, "JSON output")."""
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "severity": self.severity.value,
            "path": self.path,
            "location": None if self.line is None else {"line": self.line, "column": self.column},
            "end_location": None
            if self.end_line is None
            else {"line": self.end_line, "column": self.end_column},
            "fix": None
            if self.fix is None
            else {
                "description": self.fix.description,
                "applicability": self.fix.applicability.value,
                "edits": [
                    {"start": e.start, "end": e.end, "content": e.content} for e in self.fix.edits
                ],
            },
            "hint": self.hint,
            "ranks": list(self.ranks),
            "related": [
                {"path": r.path, "location": {"line": r.line, "column": r.column}, "message": r.message}
                for r in self.related
            ],
            "details": self.details,
        }


@dataclass(frozen=True)
class ToolError:
    """Something ddpcheck could not do: a file it could not read or check (`code` names the tool
    code: DDP902, DDP903), or a problem of the run itself (a fix it could not write; `code` None).
    Never a finding: no selection or `# noqa` hides it, and every report format shows it, so a
    file that was not checked never passes for one that was."""

    path: str | None
    message: str  # one line, worded for the user, without the path
    code: str | None = None

    @property
    def line(self) -> str:
        """The error line as printed after `ddpcheck: error: `."""
        return f"{self.path}: {self.message}" if self.path else self.message

    @property
    def unchecked(self) -> bool:
        """The file named was not (fully) checked."""
        return self.code is not None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "code": self.code, "message": self.message}
