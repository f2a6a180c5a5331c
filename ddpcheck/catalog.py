"""Every code ddpcheck can report — static rules, runtime checks, tool diagnostics — in one catalogue.

The classes register themselves when they are defined (ddpcheck/describe.py); this module loads
the modules that define them and answers questions about the result. It imports neither half:
the halves are named below as the packages that register codes, and loaded only when a
question needs them, so `ddpcheck rules`, `explain` and code validation stay light, and linting
never loads the runtime checks unless a selection or a `# noqa` names one.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import lru_cache

from ddpcheck import tool_codes
from ddpcheck.describe import DOCS_URL, Described, RuleInfo, registered, render_page

__all__ = ["DOCS_URL", "Described", "Known", "RuleInfo", "all_rules", "classes", "code_named", "complete",
           "lint_codes", "render_page"]

# kind -> the packages whose modules define that kind's classes. ddpcheck's own codes ("tool")
# live in the shared base and are always loaded.
SOURCES: dict[str, str] = {
    "lint": "ddpcheck.lint.rules",
    "run": "ddpcheck.run.checks",
}
_TOOL = tool_codes.TOOL_CODES  # imported for its registrations


@lru_cache(maxsize=None)
def _load(kind: str) -> None:
    """Import every module of the package that defines `kind`'s classes (they register)."""
    package = importlib.import_module(SOURCES[kind])
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)


def classes(*kinds: str) -> dict[str, type[Described]]:
    """Code → class for the given kinds ("lint", "run", "tool"), sorted by code."""
    for kind in kinds:
        if kind in SOURCES:
            _load(kind)
    return dict(sorted((code, cls) for code, cls in registered().items() if cls.kind in kinds))


@lru_cache(maxsize=None)
def _codes_by_name(kind: str) -> dict[str, str]:
    return {cls.name: code for code, cls in classes(kind).items()}


def code_named(name: str, kind: str = "run") -> str:
    """The code of the check called `name` (`"collective-hang"` → its code): code outside the
    module that declares a check names it by its name, so each code is written once, on its class.
    Raises KeyError for a name no class of `kind` has."""
    return _codes_by_name(kind)[name]


def _infos(*kinds: str) -> dict[str, RuleInfo]:
    return {code: cls.info() for code, cls in classes(*kinds).items()}


@lru_cache(maxsize=1)
def all_rules() -> dict[str, RuleInfo]:
    """Code → RuleInfo for everything, sorted by code."""
    return _infos("lint", "run", "tool")


class Known(dict[str, RuleInfo]):
    """Code → RuleInfo: the static rules and tool codes, and the runtime checks once
    `with_runtime()` has been called."""

    def __init__(self, infos: dict[str, RuleInfo]) -> None:
        super().__init__(infos)
        self.complete = False

    def with_runtime(self) -> Known:
        if not self.complete:
            # Loading every runtime check module costs more than the rest of a one-file lint;
            # only a selection or a `# noqa` that names a runtime code asks for it.
            for code, info in _infos("run").items():
                self.setdefault(code, info)
            ordered = dict(sorted(self.items()))
            self.clear()
            self.update(ordered)
            self.complete = True
        return self


@lru_cache(maxsize=1)
def lint_codes() -> Known:
    """The static rules and ddpcheck's own codes, by code."""
    return Known(_infos("lint", "tool"))


def complete(known: Mapping[str, RuleInfo]) -> Mapping[str, RuleInfo]:
    """`known` with the runtime checks in it (a no-op for a full catalog)."""
    return known.with_runtime() if isinstance(known, Known) else known
