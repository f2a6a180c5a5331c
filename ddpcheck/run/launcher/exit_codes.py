"""The exit code of `ddpcheck run`.

- 130 after Ctrl-C (as a shell says it);
- 1 after a hang (ddpcheck stopped the ranks, so their exit codes are ddpcheck's, not the script's);
- otherwise the script's own non-zero exit code if it failed (the earliest rank to fail; a rank
  killed by signal N gives 128 + N, as a shell says it);
- otherwise 1 if a check failed, else 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ddpcheck.run.records import Record

INTERRUPTED, HANG = "DDP124", "DDP123"
INTERRUPTED_EXIT = 130


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
    return bool({INTERRUPTED, HANG} & set(incidents))


def exit_code(incidents: Iterable[str], script_code: int, check_failed: bool) -> int:
    codes = set(incidents)
    if INTERRUPTED in codes:
        return INTERRUPTED_EXIT
    if HANG in codes:
        return 1
    if script_code:
        return script_code
    return 1 if check_failed else 0
