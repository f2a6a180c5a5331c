"""A hang: the watchdog of each rank (ddpcheck/run/rank/hang_detection.py, always on) decided that no rank made
progress for the hang timeout, wrote its verdict to the record directory and stopped the job."""

from __future__ import annotations

import json
from pathlib import Path

from ddpcheck.findings import Severity
from ddpcheck.run.records import HANG_VERDICT_FILE, Record
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict


class CollectiveHang(Incident):
    """The job hung: no rank made progress for `--hang-timeout` seconds; the report says why, and where each rank waits.

    Every rank keeps a ledger of the collectives it enters, its own and those DDP runs for it (the
    gradient all-reduce inside `loss.backward()`, the buffer broadcast in the forward), and counts
    its batches, forwards and optimizer steps. When a rank has made no progress for the hang
    timeout (default 30 s), its watchdog reads what the training thread is doing — the ledger, its
    Python stack (readable while it is blocked inside gloo), whether it burns CPU — and shares it.
    Once every rank is stalled and none is computing, ddpcheck names the cause: uneven work
    (DDP129), the first collective the ranks entered differently (DDP128), or, when neither
    explains it, where each rank waits ("every rank waits in the same collective", "rank 1 is not
    in a collective: idle at train.py:40"). Then it stops the job within seconds and exits with
    code 1. Every rank's state and Python stack are in the JSON report (`--report`, under
    `details.states`). A rank that is computing holds the verdict back: that is slow, not hung.
    So does a rank waiting outside any collective for worker processes that compute (torch.compile
    hands code generation to a compile-worker pool; a script may wait on its own pool), and one
    waiting for a batch its DataLoader workers are preparing. A rank that never answers (stuck in
    native code that holds the GIL) is decided without after one more timeout and killed. When
    `ddpcheck run` itself is killed (a CI job's timeout sends SIGKILL), every rank exits with it.

    With `--collective-timeout S`, ddpcheck also passes `timeout=S` to `init_process_group` when
    the script passes none, so that a stuck collective raises instead of waiting 30 minutes.

    `ddpcheck trace` gives this verdict after the fact, from an NCCL job's Flight Recorder dumps:
    a collective every rank entered and some rank never completed, with that rank's last frames
    ([docs/trace.md](../docs/trace.md)).

    ## Why it matters

    A collective that not every rank joins waits for the process group's timeout — 30 minutes by
    default with gloo and NCCL — and then fails with a message that names none of your lines.

    ## How to fix

    Read the cause the report leads with. Make every rank call the same collectives in the same
    order: move collectives out of rank-dependent branches (`if rank == 0:`), and out of loops
    whose length differs per rank (uneven shards, early `break`). A long evaluation on one rank
    while the others wait is fine when it computes; raise `--hang-timeout` for one that waits on
    I/O.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#collective-functions
    """

    code = "DDP123"
    name = "collective-hang"
    severity = Severity.ERROR
    explains = ("DDP120", "DDP121", "DDP126", "DDP127")
    hint = "every rank must call the same collectives in the same order; move them out of `if rank == ...`"
    INVALID = ("""
    if dist.get_rank() == 0:
        dist.barrier()  # the other ranks never get here
    dist.all_reduce(loss)
    """,)
    VALID = ("""
    dist.barrier()  # every rank
    dist.all_reduce(loss)
    """,)


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    """The hang, whatever its cause (when DDP128 or DDP129 names the cause, their finding leads
    and this one folds into it)."""
    try:
        verdict = json.loads((Path(ctx.record_dir) / HANG_VERDICT_FILE).read_text())
    except (OSError, ValueError):
        return []
    site = verdict.get("site")
    file, _, line = site.rpartition(":") if site else (None, "", "")
    return [Verdict(CollectiveHang.code, FAIL, verdict["message"], message=verdict["message"],
                    ranks=tuple(verdict.get("ranks", ())), path=file or None,
                    line=int(line) if line.isdigit() else None,
                    details={**verdict.get("details", {}), "states": verdict.get("states", {}),
                             "timeout_s": verdict.get("timeout_s")})]


PROBE = Probe("hang", (CollectiveHang,), judge, order=1)
