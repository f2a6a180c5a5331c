from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.checks._diagnostic import Diagnostic


class SpawnUnderLauncher(Diagnostic):
    """A rank started by the launcher called `mp.spawn`: each rank would start a job of its own.

    ddpcheck runs scripts that spawn their own workers with the plain interpreter when it sees the
    call before the launch. When the call is hidden (built dynamically, in another module), a guard
    in every rank stops it instead: under torchrun, N ranks that each spawn N workers form N jobs
    on one port that wait for each other forever.

    ## Why it matters

    Without the guard the run hangs silently.

    ## How to fix

    Run the script without `--nproc` and tell ddpcheck it spawns its own workers with
    `--spawn`, or make it read `LOCAL_RANK`/`WORLD_SIZE` from the environment instead of spawning.
    """

    code = "DDP126"
    name = "spawn-under-launcher"
    severity = Severity.ERROR
    hint = "rerun with `--spawn` (and no --nproc), or read LOCAL_RANK/WORLD_SIZE instead of spawning"
