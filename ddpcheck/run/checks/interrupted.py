"""Ctrl-C (or SIGTERM) to `ddpcheck run`: every rank was stopped; the report covers what ran."""

from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.records import Record
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict


class Interrupted(Incident):
    """The run was interrupted (Ctrl-C); every rank was stopped and the report covers only what ran.

    ddpcheck stops every rank, writes the report of what it had checked by then and exits with
    code 130, the shell's code for an interrupt.

    ## Why it matters

    Checks that need the end of the run (parameters in sync at the end, `destroy_process_group`,
    unused parameters) could not be concluded.

    ## How to fix

    Nothing to fix; shorten the run (fewer steps or epochs) instead of interrupting it.
    """

    code = "DDP124"
    name = "interrupted"
    severity = Severity.WARNING
    explains = ("DDP120", "DDP121", "DDP126", "DDP127")
    hint = "the report is partial; shorten the run instead of interrupting it"


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    if not ctx.interrupted:
        return []
    steps = max([r.get("step", 0) for r in records] or [0])
    message = (f"interrupted after {steps} optimizer step(s); every rank was stopped and this report "
               "covers only what ran")
    return [Verdict(Interrupted.code, FAIL, message, message=message)]


PROBE = Probe("interrupted", (Interrupted,), judge, order=0)
