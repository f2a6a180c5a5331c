"""Every code ddpcheck can report — static rules, runtime checks, tool diagnostics — collected.

The metadata and the page live on classes (ddpcheck/describe.py); this module discovers them.
It never imports torch or libcst itself: `ddpcheck rules`, `explain` and code validation stay light.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from functools import lru_cache
from typing import TypeVar

from ddpcheck.describe import DOCS_URL, Described, RuleInfo, render_page

__all__ = ["DOCS_URL", "Described", "RuleInfo", "all_rules", "render_page", "subclasses_in"]

_Base = TypeVar("_Base")


def subclasses_in(package: str, base: type[_Base]) -> list[type[_Base]]:
    """Import every module of `package` and return the concrete subclasses of `base` defined there."""
    pkg = importlib.import_module(package)
    found: list[type[_Base]] = []
    for mod in pkgutil.iter_modules(pkg.__path__, package + "."):
        module = importlib.import_module(mod.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, base)
                and obj.__module__ == module.__name__
                and "code" in vars(obj)
            ):
                found.append(obj)
    return found


@lru_cache(maxsize=1)
def all_rules() -> dict[str, RuleInfo]:
    """Code → RuleInfo for everything, sorted by code."""
    from ddpcheck.lint.rule import Rule
    from ddpcheck.lint.tool_codes import TOOL_CODES
    from ddpcheck.run.registry import RuntimeCheck

    infos = [c.info() for c in subclasses_in("ddpcheck.lint.rules", Rule)]
    infos += [c.info() for c in subclasses_in("ddpcheck.run.checks", RuntimeCheck)]
    infos += [c.info() for c in TOOL_CODES]
    by_code: dict[str, RuleInfo] = {}
    for info in infos:
        if info.code in by_code:
            raise RuntimeError(f"duplicate rule code {info.code}: {info.name} and {by_code[info.code].name}")
        if not re.fullmatch(r"DDP\d{3}", info.code):
            raise RuntimeError(f"bad rule code {info.code!r} on {info.name}")
        by_code[info.code] = info
    return dict(sorted(by_code.items()))


_subclasses_in = subclasses_in  # ddpcheck.run.verdicts imports it under this name
