"""From per-rank records to check rows and Findings, in the launcher process. Torch-free.

    records (rank-*.json)  →  each probe's judge()  →  fold consequences  →  rows + Findings

Folding: one fault often shows up in several checks (an unwrapped model also makes gradients and
then parameters differ). The root cause keeps its finding; the consequences become SKIP rows that
say which finding explains them, so each planted fault gets exactly its own finding.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from ddpcheck.findings import Finding, Severity
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

JUDGES = (
    "ddpcheck.run.probes.shards",
    "ddpcheck.run.probes.set_epoch",
    "ddpcheck.run.probes.inputs",
    "ddpcheck.run.probes.grads",
    "ddpcheck.run.probes.params",
    "ddpcheck.run.probes.lifecycle",
    "ddpcheck.run.probes.rendezvous",
)

# consequence code -> the codes that explain it when they fail (checked in this order)
EXPLAINED_BY = {
    "DDP104": ("DDP100", "DDP101"),
    "DDP105": ("DDP108", "DDP109"),
    "DDP106": ("DDP108", "DDP109", "DDP105"),
    "DDP107": ("DDP108", "DDP109"),
    "DDP111": ("DDP108",),
}


def load_records(record_dir: str) -> list[dict]:
    """Every rank's record that can be read; a torn or missing file is just absent."""
    out = []
    for path in glob.glob(os.path.join(record_dir, "rank-*.json")):
        try:
            with open(path) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: r.get("rank", 0))


@lru_cache(maxsize=1)
def checks() -> dict:
    """code -> RuntimeCheck class for DDP100–DDP119 (discovered from ddpcheck/run/checks/)."""
    from ddpcheck.catalog import _subclasses_in
    from ddpcheck.run.catalog import RuntimeCheck

    found = {c.code: c for c in _subclasses_in("ddpcheck.run.checks", RuntimeCheck)}
    return dict(sorted((k, v) for k, v in found.items() if "DDP100" <= k <= "DDP119"))


def fix_hint(code: str) -> str | None:
    """The first paragraph of the check's `## How to fix` section."""
    cls = checks().get(code)
    if cls is None:
        return None
    body = cls.info().body
    match = re.search(r"## How to fix\s*\n(.*?)(\n\s*\n|\n##|$)", body, re.S)
    return " ".join(match.group(1).split()) if match else None


@dataclass(frozen=True)
class Row:
    """One line of the summary: a check and how it went."""

    code: str
    name: str
    status: str  # pass | fail | skip | not-run
    verdict: Verdict | None
    explained_by: str | None = None


def judge_all(records: list[dict], ctx: Context, enabled: tuple[str, ...]) -> dict[str, Verdict]:
    verdicts: dict[str, Verdict] = {}
    for name in JUDGES:
        module = importlib.import_module(name)
        if module.PROBE not in enabled:
            continue
        for verdict in module.judge(records, ctx):
            verdicts[verdict.code] = verdict
    return _fold(verdicts)


def _fold(verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    out = dict(verdicts)
    for code, causes in EXPLAINED_BY.items():
        v = out.get(code)
        if v is None or v.status != FAIL:
            continue
        for cause in causes:
            c = out.get(cause)
            if c is None or c.status != FAIL:
                continue
            if cause == "DDP105" and v.step is not None and c.step is not None and v.step < c.step:
                continue  # parameters drifted before gradients did: its own fault
            out[code] = replace(v, status=SKIP, detail=f"explained by {cause}: {v.detail}",
                                details={**v.details, "explained_by": cause})
            break
    # A DDP model that was never used is a milder thing if the gradients still agreed
    # (the script all-reduces by hand).
    used, grads, inputs = out.get("DDP109"), out.get("DDP105"), out.get("DDP104")
    if used and used.status == FAIL and grads and grads.status == PASS \
            and not (inputs and inputs.status == FAIL):  # (identical inputs: identical gradients)
        out["DDP109"] = replace(used, severity="warning", message=(used.message or "") +
                                " (Gradients were identical on every rank, so something else "
                                "synchronises them.)")
    return out


def rows(verdicts: dict[str, Verdict]) -> list[Row]:
    order = {FAIL: 0, PASS: 1, SKIP: 2, "not-run": 3}
    out = []
    for code, cls in checks().items():
        v = verdicts.get(code)
        status = v.status if v else "not-run"
        out.append(Row(code, cls.name, status, v, (v.details.get("explained_by") if v else None)))
    return sorted(out, key=lambda r: (order[r.status], r.code))


def findings(verdicts: dict[str, Verdict]) -> list[Finding]:
    out = []
    for code, v in sorted(verdicts.items()):
        if v.status != FAIL:
            continue
        cls = checks().get(code)
        severity = Severity(v.severity) if v.severity else (cls.severity if cls else Severity.ERROR)
        out.append(Finding(code=code, name=cls.name if cls else code, message=v.message or v.detail,
                           severity=severity, hint=fix_hint(code), ranks=tuple(v.ranks),
                           details={**v.details, "step": v.step, "epoch": v.epoch}))
    return out


def context_from(records: list[dict], fallback_world: int, options) -> Context:
    world = max([r.get("world_size", 0) for r in records] + [fallback_world])
    return Context(world_size=world, check_first=options.check_first, check_every=options.check_every)


__all__ = ["load_records", "judge_all", "rows", "findings", "fix_hint", "Row", "context_from",
           "PASS", "FAIL", "SKIP"]
