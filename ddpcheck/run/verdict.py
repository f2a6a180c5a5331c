"""The vocabulary of judging: the Verdict a probe's `judge` returns for one check, and the Context
it judges in. Torch-free; runs in the launcher."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

PASS, FAIL, SKIP = "pass", "fail", "skip"
# The run ended (crashed, exited, was stopped) before the point the check needs — no process group,
# no DDP model, no optimizer step yet: the check neither passed nor failed (launcher/reach.py).
NOT_REACHED = "not-reached"


@dataclass(frozen=True)
class Verdict:
    code: str  # the check's code, DDP1nn
    status: str  # PASS, FAIL, SKIP (nothing to check, or folded) or NOT_REACHED (the run ended before)
    detail: str  # one line for the summary table
    message: str | None = None  # the finding's message when FAIL: what is wrong, what to do
    ranks: tuple[int, ...] = ()
    step: int | None = None  # first optimizer step concerned (1-based)
    epoch: int | None = None  # first epoch concerned (0-based, as DataLoader passes go)
    severity: str | None = None  # overrides the check's default severity
    details: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    path: str | None = None  # the user's file and line, when the finding has one
    line: int | None = None
    hint: bool = True  # show the check's fix beside the finding


@dataclass(frozen=True)
class SpawnSite:
    """Where a script starts its own worker processes (`mp.spawn`), found before the launch."""

    path: str
    line: int
    call: str  # as written, e.g. "mp.spawn"; "--spawn" when the user said so
    # The script also reads the launcher's environment and spawns on one branch only: ddpcheck
    # ran it with torchrun first, and switched when a rank called the spawn.
    switched: bool = False


@dataclass(frozen=True)
class Context:
    """What judges know besides the records: the job as the launcher saw it."""

    world_size: int
    check_first: int = 20
    check_every: int = 50
    record_dir: str = ""
    exit_codes: Mapping[int, int] = field(default_factory=dict)  # rank -> code, ranks torchrun saw fail
    interrupted: bool = False  # Ctrl-C: ddpcheck stopped every rank
    spawn_site: SpawnSite | None = None  # the script started its own workers
    nproc_ignored: bool = False  # ... and --nproc was given but not used


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 checked step', '3 checked steps'."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


def group_ranks(values: dict[int, Any]) -> list[tuple[Any, tuple[int, ...]]]:
    """Ranks grouped by equal value, biggest group first (then by lowest rank)."""
    groups: dict[Any, list[int]] = {}
    for rank, value in sorted(values.items()):
        groups.setdefault(value, []).append(rank)
    return sorted(((v, tuple(r)) for v, r in groups.items()), key=lambda g: (-len(g[1]), g[1][0]))


def odd_ranks(values: dict[int, Any]) -> tuple[int, ...]:
    """The ranks outside the biggest group of equal values (all ranks but the first if no majority)."""
    groups = group_ranks(values)
    return tuple(sorted(r for _, ranks in groups[1:] for r in ranks))


def describe_groups(values: dict[int, Any]) -> str:
    groups = group_ranks(values)
    return " vs ".join("ranks " + ",".join(map(str, r)) if len(r) > 1 else f"rank {r[0]}"
                       for _, r in groups)
