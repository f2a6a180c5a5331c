"""The collectives every rank entered, compared across ranks, and the work each rank did.

Every rank keeps a ledger of its collectives — the ones your code calls and the ones DDP runs for
you (rank/ledger.py) — with a running hash. At checked steps the hash and the count travel with the
check exchange (two int64 per rank); when they differ, the ranks swap their last 32 calls once to
find the first one that differs. When the job hangs, the watchdog's verdict says the same from the
ranks' states (rank/watchdog.py); when it crashes, the ranks' live files do (run/live.py). The data
loader passes each rank made (batches drawn, DDP forwards, optimizer steps) are compared after the
job.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run import diagnose
from ddpcheck.run.checks._compare import at_least, misaligned_step
from ddpcheck.run.calls import WORLD, CallLog, first_mismatch, ranks_text
from ddpcheck.run.records import HANG_VERDICT_FILE, Record, section
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session

NAME = "collectives"
SLOT_COUNT, SLOT_HASH = "calls", "calls_hash"


class CollectiveMismatch(RuntimeCheck):
    """The ranks entered different collectives: the report names the first call where they differ, with each side's ranks and lines.

    Every rank keeps a ledger of the collectives it enters — yours (`all_reduce`, `broadcast`,
    `barrier`, ...) and those DDP runs for you (the gradient all-reduce inside `loss.backward()`,
    the buffer broadcast in the forward, the broadcasts when it is built) — with what every rank
    must pass alike: the operation, the tensor's dtype and shape, the reduce op, the root rank,
    and for DDP the number and sizes of its gradient buckets. A running hash of it is compared at
    every checked step; when a job hangs or crashes, the last calls of every rank are. The finding
    is the first call that differs, e.g. "call #2: rank 2 all_reduce float32[5] at stats.py:10,
    ranks 0, 1, 3 all_reduce float32[4] at stats.py:10", or "call #5: rank 0 barrier at
    train.py:25, ranks 1–3 DDP's gradient all-reduce in loss.backward() at train.py:22". A call
    made only under an `if` on the rank (`if dist.get_rank() == 0: dist.all_reduce(total)`) is
    named with that `if`, the rank that made it alone and its line — whether the other ranks met
    it with their next collective, finished the script, or wait outside any collective.

    `ddpcheck trace` gives this verdict after the fact, from the PyTorch Flight Recorder dumps of
    a job that ran without ddpcheck: the first sequence id at which the ranks' recorded collectives
    differ (operation, shapes or dtypes), each side's ranks and stack ([docs/trace.md](../docs/trace.md)).

    ## Why it matters

    gloo and NCCL pair collectives by their order, not by what they are. Two ranks in different
    collectives wait for each other until the process group's timeout (30 minutes by default);
    with different shapes the call may fail with "Received data size doesn't match expected
    size", or finish with a result computed from mismatched buffers.

    ## How to fix

    Make every rank call the same collectives, in the same order, with tensors of the same shape
    and dtype: move collectives out of `if rank == ...` branches, pad per-rank data to a common
    size before an `all_reduce` (or use `all_gather_object`), and keep optional collectives
    (logging, metrics) unconditional.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#collective-functions
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP128"
    name = "collective-mismatch"
    severity = Severity.ERROR
    needs = "init"  # collectives need a process group, not a DDP model or an optimizer step
    explains = ("DDP120", "DDP123", "DDP127")
    hint = "every rank must make the same collective calls in the same order, with equal shapes and dtypes"
    INVALID = ("""
    if rank == 0 and step == 3:
        dist.barrier()  # the other ranks are in DDP's gradient all-reduce: both wait forever
    """,)
    VALID = ("""
    if step == 3:
        dist.barrier()  # every rank
    """,)


class UnevenWork(RuntimeCheck):
    """Ranks did different amounts of work: more batches in an epoch on some ranks, or a rank left the training loop early.

    Every rank counts, per data loader pass (epoch), the batches it drew, and its DDP forwards and
    optimizer steps. Ranks that drew different numbers of batches in an epoch are reported with
    the counts ("rank 3 had drawn 5 batches, ranks 0–2 drew 4"); so is a rank that left the
    training loop while the others went on (early stopping on its own loss, a `break` on a
    rank-local condition), with the loop and the `break`. When uneven work is what made the job
    hang or crash — the extra backward's all-reduce meets the others' next collective — this is
    the finding the report leads with.

    `ddpcheck trace` gives this verdict after the fact, from the PyTorch Flight Recorder dumps of
    a job that ran without ddpcheck: ranks that entered a collective the others never arrived at,
    with where each side made its last call ([docs/trace.md](../docs/trace.md)).

    ## Why it matters

    Under DDP, the backward after a forward with gradient sync on all-reduces every gradient
    bucket, and every rank must join each of those all-reduces. A rank with one more batch waits
    in them for ranks that have left the loop: the job hangs until the process group's timeout,
    or crashes when the all-reduce meets another collective of a different size.

    ## How to fix

    Give every rank the same number of batches: a `DistributedSampler` (it pads every rank's shard
    to the same length, or with `drop_last=True` truncates them), and for an `IterableDataset`
    shards of equal length (drop the remainder, or pad it). Decide early stopping on a value every
    rank agrees on (`all_reduce` the loss or the stop flag first). When uneven inputs are intended, wrap the
    loop in DDP's `model.join()` context (or `torch.distributed.algorithms.Join`), which shadows
    the collectives of ranks that ran out.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.join
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    - https://pytorch.org/tutorials/advanced/generic_join.html
    """

    code = "DDP129"
    name = "uneven-work"
    severity = Severity.ERROR
    needs = "init"
    explains = ("DDP120", "DDP123", "DDP127", "DDP128")
    hint = ("give every rank the same number of batches (DistributedSampler; equal IterableDataset shards) and "
            "decide early stopping on an all-reduced value; for intended uneven inputs use DDP's join()")
    INVALID = ("""
    for step in range(max_steps):
        loss = train_step(model)
        if loss.item() < 0.05:  # this rank's own loss: the others go on
            break
    """,)
    VALID = ("""
    for step in range(max_steps):
        loss = train_step(model)
        stop = torch.tensor(float(loss.item() < 0.05))
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank decides alike
        if stop.item():
            break
    """,)


# --- in every rank -----------------------------------------------------------------------------------
def capture(session: Session) -> None:
    """Exchange the running hash and count of the world group's collectives at checked steps;
    where they differ, swap the last calls once to find the first one that differs."""
    from ddpcheck.run.rank.ledger import LEDGER

    count_at, hash_at = session.add_slot(SLOT_COUNT), session.add_slot(SLOT_HASH)
    mine = session.section(NAME)

    def stage(optimizer: Optimizer, step: int) -> None:
        world = LEDGER.world()
        session.stage(SLOT_COUNT, world.entered)
        session.stage(SLOT_HASH, world.hash)

    def compare(step: int, rows: list[list[int]]) -> None:
        mine["compared"] = int(mine.get("compared", 0)) + 1
        if len({(row[count_at], row[hash_at]) for row in rows}) == 1 or "mismatch" in mine:
            return
        import torch.distributed as dist

        logs: list[Any] = [None] * len(rows)
        dist.all_gather_object(logs, LEDGER.world().log(None).to_json(), group=session.group)
        found = first_mismatch({r: CallLog.from_json(log) for r, log in enumerate(logs)})
        mine["mismatch"] = {"step": step, "counts": [row[count_at] for row in rows]} | (
            {"message": found.message(), "ranks": list(found.odd_ranks), "call": found.seq,
             "site": next((c.site for s in found.sides[1:] for c in s.calls if c.site), None)}
            if found is not None else {})
        session.flush(force=True)

    session.after_step.append(stage)
    session.on_exchange.append(compare)


# --- in the launcher ---------------------------------------------------------------------------------
def _hang_verdict(ctx: Context) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(ctx.record_dir) / HANG_VERDICT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _failed(records: list[Record], ctx: Context) -> bool:
    return bool(ctx.exit_codes) or any(r.get("exit_code") for r in records) or \
        any(r.get("status") != "finished" for r in records)


def _verdict(code: str, message: str, ranks: tuple[int, ...], site: str | None, details: dict[str, Any],
             step: int | None = None) -> Verdict:
    file, _, line = site.rpartition(":") if site else ("", "", "")
    return Verdict(code, FAIL, message, message=message, ranks=ranks, path=file or None,
                   line=int(line) if line.isdigit() else None, step=step, details=details)


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    found: dict[str, Verdict] = {}
    hang = _hang_verdict(ctx)
    if hang is not None and hang.get("code") in (CollectiveMismatch.code, UnevenWork.code):
        found[hang["code"]] = _verdict(hang["code"], hang["message"], tuple(hang.get("ranks", ())), hang.get("site"),
                                       {**hang.get("details", {}), "states": hang.get("states", {}),
                                        "timeout_s": hang.get("timeout_s")})
    elif hang is None and _failed(records, ctx):
        states = diagnose.states_from_files(ctx.record_dir, records)
        ended = frozenset(int(r.get("rank", -1)) for r in records
                          if r.get("status") == "finished" and r.get("exit_code") == 0)
        why = diagnose.diagnose(states, ctx.world_size, ended=ended) if len(states) == ctx.world_size else None
        if why is not None:
            # A rank that raised on its own (not a peer's broken connection) is its own finding.
            own = [c for r in records if (c := section(r, "crash")) and not c.get("consequence", True)]
            at = min([s.progress_at for s in states.values() if s.progress_at] or [0.0]) or None
            found[why.code] = _verdict(why.code, why.message + "; the job failed there", why.ranks, why.site,
                                       {**why.details, "at": at, "from": "the ranks' last collectives",
                                        **({"explains": ["DDP123"]} if own else {})})
    mismatch = next((section(r, NAME).get("mismatch") for r in records if section(r, NAME).get("mismatch")), None)
    if CollectiveMismatch.code not in found and mismatch is not None:
        message = mismatch.get("message") or (
            "the ranks had entered different collectives by optimizer step "
            f"{mismatch['step']} (counts {mismatch.get('counts')}), more than 32 calls before it was seen")
        found[CollectiveMismatch.code] = _verdict(CollectiveMismatch.code, message, tuple(mismatch.get("ranks", ())),
                                                  mismatch.get("site"), {"explains": ["DDP123"]}, step=mismatch["step"])
    if UnevenWork.code not in found:
        uneven = _uneven_after_the_job(records)
        if uneven is not None:
            found[UnevenWork.code] = uneven
    stopped = " until the job stopped" if hang is not None or _failed(records, ctx) else ""
    stopped += at_least(records)
    return [found.get(CollectiveMismatch.code) or _with(_mismatch_pass(records), stopped),
            found.get(UnevenWork.code) or _with(_uneven_pass(records), stopped)]


def _with(verdict: Verdict, tail: str) -> Verdict:
    return replace(verdict, detail=verdict.detail + tail) if tail and verdict.status == PASS else verdict


def _logs(records: list[Record]) -> dict[int, dict[str, Any]]:
    return {int(r.get("rank", 0)): section(r, diagnose.SECTION) for r in records if section(r, diagnose.SECTION)}


def _mismatch_pass(records: list[Record]) -> Verdict:
    ledgers = _logs(records)
    if not ledgers:
        return Verdict(CollectiveMismatch.code, SKIP, "no collectives recorded")
    entered = max(int(s.get("groups", {}).get(WORLD, {}).get("entered", 0)) for s in ledgers.values())
    compared = max([int(section(r, NAME).get("compared", 0)) for r in records] or [0])
    where = f", compared at {compared} checked step{'s' if compared != 1 else ''}" if compared else ""
    return Verdict(CollectiveMismatch.code, PASS, f"{entered} collectives, the same on every rank{where}")


def _passes(records: list[Record]) -> dict[int, diagnose.RankState]:
    out = {}
    for rank, ledger in _logs(records).items():
        passes = tuple(diagnose.PassInfo.from_json(p) for p in ledger.get("passes", ()))
        out[rank] = diagnose.RankState(rank, {}, int(ledger.get("steps", 0)), int(ledger.get("forwards", 0)), passes)
    return out


def _uneven_after_the_job(records: list[Record]) -> Verdict | None:
    """Epochs in which the ranks drew different numbers of batches, or a different number of
    optimizer steps in all, in a job that did not use DDP's join()."""
    if any(r.get("used_join") for r in records) or len(records) < 2:
        return None
    states = _passes(records)
    if len(states) < 2:
        return None
    uneven = diagnose.uneven_passes(states)
    if uneven is not None:
        return _verdict(UnevenWork.code, uneven.message(), uneven.odd, uneven.site,
                        {"uneven": uneven.to_json(), "explains": ["DDP123", CollectiveMismatch.code]})
    finished = [r for r in records if r.get("status") == "finished" and not r.get("exit_code")]
    steps = {int(r.get("rank", 0)): int(r.get("step", 0)) for r in finished}
    # Ranks that stepped at different lines step an optimizer of their own (a reference model on
    # rank 0): their totals differ by those steps, which no other rank waits for.
    if len(finished) == len(records) and len(set(steps.values())) > 1 and misaligned_step(records) is None:
        groups: dict[int, list[int]] = {}
        for rank, n in sorted(steps.items()):
            groups.setdefault(n, []).append(rank)
        ordered = sorted(groups.items(), key=lambda g: (-len(g[1]), g[1][0]))
        odd = tuple(sorted(r for _, rs in ordered[1:] for r in rs))
        text = ", ".join(f"{ranks_text(rs)} ran {n} optimizer step{'s' if n != 1 else ''}"
                         for n, rs in sorted(ordered, key=lambda g: (len(g[1]), g[1])))
        return _verdict(UnevenWork.code, f"uneven work: {text}", odd, None,
                        {"steps": {str(r): n for r, n in steps.items()}, "explains": ["DDP123", CollectiveMismatch.code]})
    return None


def _uneven_pass(records: list[Record]) -> Verdict:
    if any(r.get("used_join") for r in records):
        return Verdict(UnevenWork.code, PASS, "uneven inputs handled by DDP's join()")
    states = _passes(records)
    if not states:
        return Verdict(UnevenWork.code, SKIP, "no work recorded")
    # Passes every rank made (a loader only rank 0 walks, for evaluation, is not compared).
    shared = set.intersection(*({p.key for p in s.passes} for s in states.values()))
    epochs = len(shared)
    steps = sorted({s.steps for s in states.values()})
    what = f"{epochs} data loader pass{'es' if epochs != 1 else ''} and " if epochs else ""
    if len(steps) > 1 and misaligned_step(records) is not None:
        return Verdict(UnevenWork.code, PASS, f"{what}{steps[0]}–{steps[-1]} optimizer steps per rank: "
                       "some ranks also step an optimizer of their own (they stepped at different lines), "
                       "and the collectives match")
    return Verdict(UnevenWork.code, PASS, f"{what}{steps[-1]} optimizer step{'s' if steps[-1] != 1 else ''}, the same on every rank")


PROBE = Probe(NAME, (CollectiveMismatch, UnevenWork), judge, capture, order=3)
