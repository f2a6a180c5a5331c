"""Static findings that explain a divergence: the functions on each side's stack are linted (by
the function the command hands in) and the findings of the codes that make ranks part ways, inside
those functions, are attached — as likely causes, since a finding on the path is not a proof."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable

from ddpcheck.findings import Finding, Related
from ddpcheck.trace.align import Comparison
from ddpcheck.trace.source import enclosing
from ddpcheck.trace.verdicts import Place, places

# Rank-conditional collective, uneven shards, rank-local break, unreduced shard metric.
CAUSE_CODES = ("DDP009", "DDP034", "DDP035", "DDP036")

Linter = Callable[[list[str]], list[Finding]]


def on_path(comparison: Comparison, source: str) -> list[Place]:
    """Every user frame, on every side, of the calls at the divergence and the last calls."""
    seen: dict[tuple[str, int], Place] = {}
    for side in comparison.sides:
        for call in (side.call, side.last):
            for place in places(call, source):
                if place.local:
                    seen.setdefault((place.local, place.frame.line), place)
    return list(seen.values())


def _inside(finding: Finding, path_places: Iterable[Place]) -> bool:
    if finding.path is None or finding.line is None:
        return False
    here = os.path.abspath(finding.path)
    for place in path_places:
        if place.local is None or os.path.abspath(place.local) != here:
            continue
        span = enclosing(place.local, place.frame.line)
        if span is None or span[0] <= finding.line <= span[1]:
            return True
    return False


def attach(verdict: Finding, comparison: Comparison, source: str, lint: Linter) -> tuple[Finding, list[Finding]]:
    """The verdict with its likely causes named, and the static findings themselves."""
    path_places = on_path(comparison, source)
    files = sorted({p.local for p in path_places if p.local})
    if not files:
        return verdict, []
    found = [f for f in lint(files) if f.code in CAUSE_CODES and _inside(f, path_places)]
    found.sort(key=lambda f: f.sort_key())
    if not found:
        return verdict, []
    named = "; ".join(f"{f.code} {f.name} at {_shown(f)}" for f in found[:3])
    message = (f"{verdict.message}. Likely cause (a static finding on the divergent path, not a proof): {named}")
    related = verdict.related + tuple(
        Related(f.path or "", f.line or 0, f.column or 1, f"likely cause: {f.code} {f.name}") for f in found)
    details = dict(verdict.details)
    details["likely_causes"] = [f.to_dict() for f in found]
    return dataclasses.replace(verdict, message=message, related=related, details=details), found


def _shown(f: Finding) -> str:
    path = f.path or ""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return f"{path if rel.startswith('..') else rel}:{f.line}"
