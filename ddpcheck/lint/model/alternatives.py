"""Calls that are alternatives of one another: the same value made one way or another in the arms
of one `if` chain (`ckpt = torch.load(w1)` / `elif ...: ckpt = torch.load(w3)` / ...,
`optimizer = AdamW(..., lr=1e-3)` / `else: optimizer = Adam(..., lr=2e-4)`). A run makes that
value once, in one arm, and a fix goes where the value is made the way the run makes it: rules
that report such a call once per value ask `one_per_value` for the one to report."""

from __future__ import annotations

from collections.abc import Sequence

from ddpcheck.lint.model.conditions import exclusive_arms
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.options import default_takes


def bound_name(site: CallSite) -> str | None:
    """The name (or `self.x` chain) the call's value is bound to in its scope (`ckpt =
    torch.load(path)` → "ckpt"), None when it is not bound as a whole."""
    for name, bindings in site.scope.assignments.items():
        if any(b is site.node for b in bindings):
            return name
    return None


def alternatives(a: CallSite, b: CallSite) -> bool:
    """`a` and `b` bind the same name in different arms of one `if` chain of one function:
    at most one of them runs, and what it makes is the same value."""
    if a is b or a.module is not b.module or a.scope is not b.scope:
        return False
    if not exclusive_arms(a.guards, b.guards):
        return False
    name = bound_name(a)
    return name is not None and name == bound_name(b)


def _default_rank(site: CallSite) -> int:
    """How many of the arms `site` sits in the command line's defaults leave untaken (alternatives
    share the outer ones: the count differs by the arms of their own chain)."""
    return sum(default_takes(site.module, g.test, g.negated) is False for g in site.guards)


def one_per_value(sites: Sequence[CallSite]) -> list[CallSite]:
    """`sites` less the alternatives of one kept: of calls that make one value in the arms of one
    `if` chain, the one in the arm the command line's defaults take, else the first written.
    The order of `sites` is kept."""
    kept: list[CallSite] = []
    for site in sorted(sites, key=lambda s: (_default_rank(s), s.index)):
        if not any(alternatives(site, other) for other in kept):
            kept.append(site)
    chosen = {id(s) for s in kept}
    return [s for s in sites if id(s) in chosen]
