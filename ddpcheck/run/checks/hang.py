"""A hang: the watchdog of each rank (ddpcheck/run/rank/hangs.py, always on) decided that no rank made
progress for the hang timeout, wrote its verdict to the record directory and stopped the job."""

from __future__ import annotations

import json
from pathlib import Path

from ddpcheck.findings import Severity
from ddpcheck.run.records import HANG_VERDICT_FILE, Record
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict


class CollectiveHang(Incident):
    """The job hung: no rank made progress for `--hang-timeout` seconds; the report says where each rank waits.

    Every rank keeps a cheap record of the collectives it entered (operation, tensor shape and
    dtype, your call site, a sequence number). When no rank has made progress for the hang
    timeout (default 30 s), ddpcheck dumps every rank's Python stack, compares the records and
    names the mismatch, e.g. "rank 0 is in barrier at train.py:42 (call #7); ranks 1–3 are in
    all_reduce at train.py:57 (call #7)". Then it stops the job and exits with code 1. The stacks
    are in the JSON report (`--report`, under `details.states`). A rank that stepped its optimizer
    more often than the others waits in "ddpcheck's check exchange after optimizer step N".

    The watchdog only calls it a hang when every rank is stalled and at least one waits in a
    collective: a long evaluation without collectives is slow, not hung. When the script passes
    no `timeout=` to `init_process_group`, ddpcheck passes four times the hang timeout (at least
    60 s) as a backstop.

    ## Why it matters

    A collective that not every rank joins waits for the process group's timeout — 30 minutes by
    default with gloo and NCCL — and then fails with a message that names none of your lines.

    ## How to fix

    Make every rank call the same collectives in the same order: move collectives out of
    rank-dependent branches (`if rank == 0:`), and out of loops whose length differs per rank
    (uneven shards, early `break`).

    ## References

    - https://pytorch.org/docs/stable/distributed.html#collective-functions
    """

    code = "DDP123"
    name = "collective-hang"
    severity = Severity.ERROR
    explains = ("DDP120", "DDP121", "DDP126", "DDP127")
    hint = "every rank must call the same collectives in the same order; move them out of `if rank == ...`"
    BAD = """
    if dist.get_rank() == 0:
        dist.barrier()  # the other ranks never get here
    dist.all_reduce(loss)
    """
    GOOD = """
    dist.barrier()  # every rank
    dist.all_reduce(loss)
    """


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    try:
        verdict = json.loads((Path(ctx.record_dir) / HANG_VERDICT_FILE).read_text())
    except (OSError, ValueError):
        return []
    site = verdict.get("site")
    file, _, line = site.rpartition(":") if site else (None, "", "")
    return [Verdict(CollectiveHang.code, FAIL, verdict["message"], message=verdict["message"],
                    ranks=tuple(verdict.get("ranks", ())), path=file or None,
                    line=int(line) if line.isdigit() else None,
                    details={"states": verdict.get("states", {}), "timeout_s": verdict.get("timeout_s")})]


PROBE = Probe("hang", (CollectiveHang,), judge, order=1)
