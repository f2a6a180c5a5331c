from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.checks._diagnostic import Diagnostic


class Interrupted(Diagnostic):
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
    hint = "the report is partial; shorten the run instead of interrupting it"
