"""One module per static rule, named for what it catches. Each rule class registers its code in the
catalogue when it is defined (ddpcheck/describe.py); nothing is listed by hand."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpcheck.lint.rule import Rule


@lru_cache(maxsize=1)
def rule_classes() -> tuple[type[Rule], ...]:
    """Every static rule class, in code order."""
    from ddpcheck.catalog import classes
    from ddpcheck.lint.rule import Rule

    return tuple(c for c in classes("lint").values() if issubclass(c, Rule))
