"""A script that starts its own workers (`mp.spawn`), found before the launch (launcher/plan.py) and run
with the plain interpreter; its workers are instrumented like torchrun's ranks."""

from __future__ import annotations

import os

from ddpcheck.findings import Severity
from ddpcheck.run.records import Record
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict


class SpawnStyleScript(Incident):
    """The script starts its own worker processes (`mp.spawn`); ddpcheck ran it with the plain interpreter.

    Scripts written like the PyTorch tutorials call `torch.multiprocessing.spawn(worker,
    nprocs=N)` themselves. Under torchrun every rank would start its own job on the same port, and
    the run hangs silently. ddpcheck sees the call before the launch, runs the script with the plain
    Python interpreter, and instruments the workers it spawns, with the same checks and report. The
    number of processes is the script's own: `--nproc` is ignored for such a script (with `--cpu`
    it is the number of emulated GPUs that `torch.cuda.device_count()` returns).

    A script that runs either way — `if args.spawn: mp.spawn(...)`, otherwise one rank of a
    torchrun job that reads `LOCAL_RANK` — is launched with torchrun; if every rank then calls the
    spawn before `init_process_group`, ddpcheck runs the script again with the plain interpreter
    and says so here.

    ## Why it matters

    Launching a spawn-style script with torchrun and `--nproc 4` runs 16 processes in 4 jobs that
    wait for each other forever.

    ## How to fix

    Nothing to fix. To use torchrun features (several nodes, restarts), read `LOCAL_RANK`,
    `RANK` and `WORLD_SIZE` from the environment instead of spawning.
    """

    code = "DDP125"
    name = "spawn-style-script"
    severity = Severity.INFO
    hint = "--nproc is ignored: the script chooses its own number of processes"
    INVALID = ("""
    if __name__ == "__main__":
        mp.spawn(train, args=(world_size,), nprocs=world_size)
    """,)


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    site = ctx.spawn_site
    if site is None:
        return []
    extra = "; --nproc was ignored (the script chooses its own number of processes)" if ctx.nproc_ignored else ""
    said = site.call == "--spawn"
    how = "as --spawn says" if said else f"{site.call} at {os.path.basename(site.path)}:{site.line}"
    first = ("; it also reads the launcher's environment, so ddpcheck first ran it with torchrun, "
             "where every rank took the spawn branch" if site.switched else "")
    message = (f"the script starts its own workers ({how}); ddpcheck ran it with the plain interpreter "
               f"and checked the workers{extra}{first}")
    return [Verdict(SpawnStyleScript.code, FAIL, message, message=message, path=site.path,
                    line=None if said else site.line, hint=ctx.nproc_ignored)]


PROBE = Probe("spawn-style", (SpawnStyleScript,), judge, order=3)
