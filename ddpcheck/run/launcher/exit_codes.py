"""The exit code of `ddpcheck run`: a few fixed codes, so that ddpcheck's own usage error and a
script that exits 2 are never confused (pytest's way; the script's own code is in the report,
`run.job.script_exit_code`, and on the summary line).

| code | meaning |
|---|---|
| 0 | the script ran and exited 0, and every finding (if any) is advice: severity `info` |
| 1 | findings of severity `warning` or `error`: a check failed, or the run crashed or hung |
| 2 | usage or configuration error (a bad flag, an unknown code, no such script): nothing ran |
| 3 | the script exited non-zero (or a rank was killed) and nothing else explains it |
| 130 | interrupted (Ctrl-C); the partial report is written |

Findings of severity `info` are advice and never set exit 1 by themselves: where the time went
(DDP141 data-bound, DDP142 communication-bound — a loaded CI runner can look data-bound), the
CUDA emulation (DDP122), a script that spawns its own workers (DDP125), one that ended before
training (DDP130; its own exit code still decides between 0 and 3). They are reported all the
same, in every output format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ddpcheck.catalog import code_named
from ddpcheck.findings import Finding, Severity
from ddpcheck.run.records import Record

# The incidents that decide the exit code themselves, by name (their codes are on their classes).
INTERRUPTED, HANG = "interrupted", "collective-hang"
FINDINGS_EXIT, USAGE_EXIT, SCRIPT_FAILED_EXIT, INTERRUPTED_EXIT = 1, 2, 3, 130


def script_exit_code(records: list[Record], failed_ranks: Mapping[int, int]) -> int:
    """The user's script's own exit code: the earliest non-zero one a rank recorded (later ones
    are usually other ranks failing because it left), else what the launcher saw (a rank killed
    before it could write its record)."""
    failed = [r for r in records if r.get("exit_code")]
    if failed:
        return int(min(failed, key=lambda r: r.get("ended_at") or float("inf"))["exit_code"])
    for rank in sorted(failed_ranks):
        code = failed_ranks[rank]
        if code:
            return code if code > 0 else 128 + (-code)  # -6 (SIGABRT) -> 134, as a shell says it
    return 0


def stopped_by_ddpcheck(incidents: Iterable[str]) -> bool:
    """ddpcheck ended the ranks itself (a hang, Ctrl-C): their exit codes are not the script's."""
    return bool({code_named(INTERRUPTED), code_named(HANG)} & set(incidents))


def fails_the_run(findings: Iterable[Finding]) -> bool:
    """Whether the findings set exit 1: any that is not mere advice (severity `info`)."""
    return any(f.severity is not Severity.INFO for f in findings)


def exit_code(happened: Iterable[str], script_code: int, findings: bool) -> int:
    """`happened`: every incident that happened (selected or not); `findings`: a selected finding
    of severity error or warning was reported (`fails_the_run`)."""
    codes = set(happened)
    if code_named(INTERRUPTED) in codes:
        return INTERRUPTED_EXIT
    if code_named(HANG) in codes or findings:
        return FINDINGS_EXIT
    if script_code:
        return SCRIPT_FAILED_EXIT
    return 0
