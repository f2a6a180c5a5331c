"""The registry of runtime checks: what a check is, and how `ddpcheck run` finds every one.

Torch-free: `ddpcheck rules` and `explain` import it. The checks themselves live in
`ddpcheck/run/checks/`, one module per *probe*: the code that captures one kind of fact inside
every rank and judges it across ranks in the launcher. A probe module declares

- one `RuntimeCheck` subclass per code it judges: `code`, `name`, `severity`, the docstring (the
  page that `ddpcheck explain` prints and `rules/CODE.md` holds: a one-line summary, then
  `## Why it matters`, `## How to fix`, `## References`) and `INVALID` / `VALID` examples (tuples of
  programs: the first of each is the page's pair; tests/test_runtime_examples.py parses them);
- `capture(session)`, run in each rank once the user's code has imported torch: it appends
  callbacks to the session's hook lists (`ddpcheck/run/rank/session.py` documents them) and
  writes JSON-ready values into `session.section(NAME)`, its part of the rank's record. It imports
  torch lazily, inside the function, so the module stays importable without torch;
- `judge(records, ctx) -> list[Verdict]`, run in the launcher after the job on every rank's
  record (`ddpcheck/run/verdict.py`): PASS, FAIL (with the finding's message) or SKIP per code;
- `PROBE = Probe(name, checks, judge, capture, order)` at the end of the module.

Nothing else names it: install order, judging, selection (`--checks`), the summary table and the
rule pages all come from `probes()`. Incidents — what happened to the run rather than what the
script does (a crash, a hang, an interrupt, the CUDA emulation) — subclass `Incident`: they are
reported as findings only, never as rows of the checks table.

## Adding a runtime check

1. Copy a small probe with a capture and a judge, `ddpcheck/run/checks/inputs.py`, to
   `checks/<what_it_watches>.py`.
2. Write the check class: a free code (`ddpcheck rules` lists the taken ones; runtime checks
   use DDP1xx), a name unique across lint and run, the docstring page, the examples,
   and `explains` if its failure makes other checks fail as a consequence.
3. Write `capture` (what each rank records: callbacks on the session's hook lists; an unchecked
   step must cost nothing, so do the work in `before_step`/`after_step`, which run only at
   checked steps; `session.add_slot` for a digest to compare live) and `judge` (compare the
   records across ranks; PASS, FAIL or SKIP for each of its codes).
4. `PROBE = Probe("what-it-watches", (TheCheck,), judge, capture, order=...)` at the end.
   A probe imports no other probe (tests/test_architecture.py): what two probes share lives in
   a helper below them (`checks/_<what_it_holds>.py`, or `rank/` for what the rank writes), and
   a judge that rests on another probe's verdicts asks `verdicts_of(name, records, ctx)`.
5. `python scripts/pages.py` writes `rules/DDPnnn.md`; add a planted fault to
   `fixtures/run/train.py` and its case to `tests/runtime/test_run_checks.py`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, ClassVar

from ddpcheck.describe import Described
from ddpcheck.run.records import Record

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session
    from ddpcheck.run.verdict import Context, Verdict

CHECKS_PACKAGE = "ddpcheck.run.checks"

Judge = Callable[[list[Record], "Context"], list["Verdict"]]
Capture = Callable[["Session"], None]


class RuntimeCheck(Described):
    """Metadata of one runtime check code; the docstring is its page."""

    kind: ClassVar[str] = "run"
    incident: ClassVar[bool] = False
    # The point of the run the check needs, in program order: "init" (init_process_group returned),
    # "ddp" (a DDP model was built) or "step" (an optimizer step). When no rank got there, the
    # check is "not reached" (launcher/reach.py); None: it needs nothing.
    needs: ClassVar[str | None] = "step"
    # The one-line fix shown beside a finding; empty: the first paragraph of "## How to fix".
    hint: ClassVar[str] = ""
    # Codes whose failure this check's failure explains: their findings fold into this one (a
    # check becomes a SKIP row "explained by", an incident is dropped), so one fault is one finding.
    explains: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def fix_hint(cls) -> str | None:
        if cls.hint:
            return cls.hint
        match = re.search(r"## How to fix\s*\n(.*?)(\n\s*\n|\n##|$)", cls.info().body, re.S)
        return " ".join(match.group(1).split()) if match else None


class Incident(RuntimeCheck):
    """What happened to the run itself (a crash, a hang, an interrupt, the emulation): a finding
    when it happens, never a row of the checks table."""

    incident: ClassVar[bool] = True
    needs: ClassVar[str | None] = None


@dataclass(frozen=True)
class Probe:
    """One probe: the checks it judges, how it captures in each rank and judges in the launcher."""

    name: str  # what `--checks` calls it
    checks: tuple[type[RuntimeCheck], ...]
    judge: Judge
    capture: Capture | None = None
    order: int = 100  # captures are installed in this order (lower first), then by name
    always: bool = False  # installed even when its checks are not selected (the run needs it)

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(c.code for c in self.checks)


@lru_cache(maxsize=1)
def probes() -> tuple[Probe, ...]:
    """Every probe of `ddpcheck/run/checks/` (modules whose name starts with `_` are helpers),
    in install order. Raises on a module without a PROBE, a check class its PROBE does not list,
    or a code or name declared twice."""
    package = importlib.import_module(CHECKS_PACKAGE)
    found: list[Probe] = []
    for info in pkgutil.iter_modules(package.__path__, CHECKS_PACKAGE + "."):
        if info.name.rpartition(".")[2].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        probe = getattr(module, "PROBE", None)
        if not isinstance(probe, Probe):
            raise RuntimeError(f"{info.name} declares no `PROBE = Probe(...)`")
        declared = {obj for obj in vars(module).values()
                    if inspect.isclass(obj) and issubclass(obj, RuntimeCheck)
                    and obj.__module__ == module.__name__ and "code" in vars(obj)}
        if declared != set(probe.checks):
            missing = sorted(c.__name__ for c in declared - set(probe.checks))
            raise RuntimeError(f"{info.name}: PROBE.checks does not list {', '.join(missing) or 'its classes'}")
        found.append(probe)
    for keys in ([p.name for p in found], [c for p in found for c in p.codes],
                 [c.name for p in found for c in p.checks]):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise RuntimeError(f"runtime checks: {', '.join(twice)} declared twice")
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


def verdicts_of(name: str, records: list[Record], ctx: Context) -> list[Verdict]:
    """The verdicts of the probe that `--checks` calls `name`, for a judge whose answer rests on
    another probe's: asked by name, so that neither probe module imports the other."""
    probe = next((p for p in probes() if p.name == name), None)
    if probe is None:
        raise KeyError(f"no runtime probe is called {name!r}")
    return probe.judge(records, ctx)


def checks() -> dict[str, type[RuntimeCheck]]:
    """code -> check class, for every runtime check and incident, sorted by code."""
    return dict(sorted((c.code, c) for p in probes() for c in p.checks))


def explained_by() -> dict[str, tuple[str, ...]]:
    """consequence code -> the codes that explain it, in code order (from each check's `explains`)."""
    out: dict[str, list[str]] = {}
    for code, cls in checks().items():
        for consequence in cls.explains:
            out.setdefault(consequence, []).append(code)
    return {code: tuple(causes) for code, causes in sorted(out.items())}


def check_classes() -> list[type[RuntimeCheck]]:
    return list(checks().values())


def probe_names() -> tuple[str, ...]:
    """The names `--checks` accepts (the probes that judge table checks), in the order of their codes."""
    table = [p for p in probes() if any(not c.incident for c in p.checks)]
    return tuple(p.name for p in sorted(table, key=lambda p: min(p.codes)))
