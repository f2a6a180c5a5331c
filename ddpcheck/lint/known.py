"""The codes `ddpcheck lint` knows, without importing the runtime checks unless a question needs
them.

Linting needs the static rules and ddpcheck's own codes. The runtime checks' codes matter only
to accept a selection that names them (`--select DDP1`, a shared `[tool.ddpcheck]` table) and to
leave a `# noqa: DDP105` alone; importing every runtime check module for that would cost more
than the rest of a one-file lint, so they are added the first time such a question is asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from ddpcheck.describe import RuleInfo


class Known(dict[str, RuleInfo]):
    """Code → RuleInfo: the static rules and tool codes, and the runtime checks once
    `with_runtime()` has been called."""

    def __init__(self, infos: dict[str, RuleInfo]) -> None:
        super().__init__(infos)
        self.complete = False

    def with_runtime(self) -> Known:
        if not self.complete:
            from ddpcheck.catalog import subclasses_in
            from ddpcheck.run.registry import RuntimeCheck

            for check in subclasses_in("ddpcheck.run.checks", RuntimeCheck):
                info = check.info()
                self.setdefault(info.code, info)
            ordered = dict(sorted(self.items()))
            self.clear()
            self.update(ordered)
            self.complete = True
        return self


@lru_cache(maxsize=1)
def lint_codes() -> Known:
    """The static rules and ddpcheck's own codes, by code."""
    from ddpcheck.catalog import subclasses_in
    from ddpcheck.lint.rule import Rule
    from ddpcheck.lint.tool_codes import TOOL_CODES

    infos = [c.info() for c in subclasses_in("ddpcheck.lint.rules", Rule)] + [c.info() for c in TOOL_CODES]
    return Known(dict(sorted((i.code, i) for i in infos)))


def complete(known: Mapping[str, RuleInfo]) -> Mapping[str, RuleInfo]:
    """`known` with the runtime checks in it (a no-op for a full catalog)."""
    return known.with_runtime() if isinstance(known, Known) else known
