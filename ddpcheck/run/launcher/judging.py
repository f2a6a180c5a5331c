"""From per-rank records to check rows and Findings, in the launcher process. Torch-free.

    records (rank-*.json)  →  every probe's judge()  →  not reached?  →  fold consequences  →  rows + Findings

Every probe of the registry judges (ddpcheck/run/registry.py); a deselected probe's checks are
"not-run". A check whose point of the run (its class's `needs`: a process group, a DDP model, an
optimizer step) no rank reached is "not-reached", with the reason (ddpcheck/run/reach.py): a run
that stopped early neither passes nor fails what it never got to. Folding: one fault often shows up in several checks (an unwrapped model also makes
gradients and then parameters differ; a hang makes the stopped ranks look crashed). The root
cause keeps its finding (its check class says which codes it `explains`); a consequence that is a
check becomes a SKIP row that says which finding explains it, and a consequence that is an
incident is dropped, so each planted fault gets exactly its own finding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddpcheck.catalog import code_named
from ddpcheck.findings import Finding, Severity
from ddpcheck.run import reach, registry
from ddpcheck.run.records import Record
from ddpcheck.run.verdict import FAIL, NOT_REACHED, PASS, SKIP, Context, Verdict

@dataclass(frozen=True)
class Row:
    """One line of the summary: a check and how it went."""

    code: str
    name: str
    status: str  # pass | fail | not-reached | skip | not-run
    verdict: Verdict | None
    explained_by: str | None = None


@dataclass(frozen=True)
class Judged:
    """Every verdict of a run: one per check (the table), and the incidents in the order found."""

    checks: dict[str, Verdict]
    incidents: list[Verdict]  # those that are not explained by another finding
    happened: frozenset[str]  # every incident that happened, folded or selected or not (for the exit code)


def judge_all(records: list[Record], ctx: Context, selected: tuple[str, ...] | None) -> Judged:
    """Run the judge of every probe with a selected code (every code when `selected` is None), and
    of every incident, whose verdicts decide the exit code whether selected or not."""
    checks: dict[str, Verdict] = {}
    incidents: list[Verdict] = []
    happened: set[str] = set()
    chosen = set(registry.checks()) if selected is None else set(selected)
    for probe in registry.probes():
        kinds = {c.code: c.incident for c in probe.checks}
        if not any(kinds.values()) and not chosen & set(kinds):
            continue
        for verdict in probe.judge(records, ctx):
            if verdict.code not in kinds:
                raise RuntimeError(f"probe {probe.name} judged {verdict.code}, which it does not declare")
            if kinds[verdict.code] and verdict.status == FAIL:
                happened.add(verdict.code)
            if verdict.code not in chosen:
                continue
            if kinds[verdict.code]:
                incidents.append(verdict)
            else:
                checks[verdict.code] = verdict
    checks = reach.apply(checks, {code: cls.needs for code, cls in registry.checks().items()},
                         reach.endings(records, ctx.exit_codes), ctx.world_size)
    return _fold(checks, incidents, frozenset(happened))


def _failed(checks: dict[str, Verdict], incidents: list[Verdict], code: str) -> Verdict | None:
    found = checks.get(code) or next((v for v in incidents if v.code == code), None)
    return found if found is not None and found.status == FAIL else None


def _explains(cause: Verdict | None, code: str) -> bool:
    """A failed cause explains `code`, unless its verdict narrows what it explains in this run
    (`details["explains"]`: a mismatch seen at a checked step does not explain a later crash)."""
    if cause is None:
        return False
    only = cause.details.get("explains")
    return only is None or code in only


def _fold(checks: dict[str, Verdict], incidents: list[Verdict], happened: frozenset[str]) -> Judged:
    explained_by = registry.explained_by()
    out = dict(checks)
    kept = []
    for v in incidents:
        if v.status == FAIL and any(_explains(_failed(out, incidents, c), v.code) for c in explained_by.get(v.code, ())):
            continue
        kept.append(v)
    for code, causes in explained_by.items():
        found = out.get(code)
        if found is None or found.status != FAIL:
            continue
        v = found
        for cause in causes:
            c = _failed(out, kept, cause)
            if c is None or not _explains(c, code):
                continue
            if cause == code_named("gradients-differ") and v.step is not None and c.step is not None and v.step < c.step:
                continue  # parameters drifted before gradients did: its own fault
            out[code] = replace(v, status=SKIP, detail=f"explained by {cause}: {v.detail}",
                                details={**v.details, "explained_by": cause})
            break
    return Judged(out, kept, happened)


def rows(judged: Judged) -> list[Row]:
    """One row per check of the registry (incidents are not rows), failures first."""
    order = {FAIL: 0, PASS: 1, NOT_REACHED: 2, SKIP: 3, "not-run": 4}
    out = []
    for code, cls in registry.checks().items():
        if cls.incident:
            continue
        v = judged.checks.get(code)
        status = v.status if v else "not-run"
        out.append(Row(code, cls.name, status, v, (v.details.get("explained_by") if v else None)))
    return sorted(out, key=lambda r: (order[r.status], r.code))


def _finding(v: Verdict) -> Finding:
    cls = registry.checks()[v.code]
    severity = Severity(v.severity) if v.severity else cls.severity
    details = v.details if cls.incident else {**v.details, "step": v.step, "epoch": v.epoch}
    return Finding(code=v.code, name=cls.name, message=v.message or v.detail, severity=severity,
                   path=v.path, line=v.line, hint=cls.fix_hint() if v.hint else None,
                   ranks=tuple(v.ranks), details=details)


def incident_findings(judged: Judged) -> list[Finding]:
    return [_finding(v) for v in judged.incidents if v.status == FAIL]


def check_findings(judged: Judged) -> list[Finding]:
    return [_finding(v) for _, v in sorted(judged.checks.items()) if v.status == FAIL]


def world_size(records: list[Record], launched: int) -> int:
    """The job's world size: what the ranks said (several nodes), or what was launched here."""
    return max([int(r.get("world_size", 0)) for r in records] + [launched])
