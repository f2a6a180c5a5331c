"""One module per static rule, named for what it catches. Discovered, never registered by hand."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpcheck.lint.rule import Rule


@lru_cache(maxsize=1)
def rule_classes() -> tuple[type[Rule], ...]:
    from ddpcheck.catalog import subclasses_in
    from ddpcheck.lint.rule import Rule

    return tuple(sorted(subclasses_in(__name__, Rule), key=lambda r: r.code))
