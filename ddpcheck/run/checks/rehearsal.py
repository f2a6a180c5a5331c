"""What `ddpcheck run --rehearse 8,64,512` finds: faults that appear only at a world size larger
than the machine the script was written on. Judged in the launcher from the rehearsed ranks
(ddpcheck/run/rehearse/judge.py); an ordinary run has nothing to judge here, so these are
findings of a rehearsal only, never rows of an ordinary run's table."""

from __future__ import annotations

from typing import Any

from ddpcheck.findings import Severity
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import Context, Verdict


class RehearsalCheck(Incident):
    """The codes of a rehearsal: none of them is judged by an ordinary run."""


class UnevenShardAtScale(RehearsalCheck):
    """At this world size some ranks draw fewer training batches than others, or none.

    ## Why it matters

    Every rank must make the same collectives. A rank whose shard of the training data is shorter
    leaves the epoch early and the others wait for it at their next gradient all-reduce: on a real
    cluster the job hangs at the first collective after the short rank's last batch (an empty
    shard: at the very first one), and nothing says why until the collective timeout. This happens
    when the data is split by hand (`range(rank, len(data), world_size)`, `data[rank::world_size]`)
    and the dataset does not divide by the world size, or has fewer samples than ranks.
    `ddpcheck run --rehearse` computes every rank's shard from the sampler's parameters and
    compares the representative ranks' `len(loader)`.

    ## How to fix

    Shard with `DistributedSampler` (it pads every rank to the same length; `drop_last=True`
    drops the remainder instead), or pad or truncate a hand-made split to the same length on every
    rank; check that the dataset has at least `world_size × batch_size` samples.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP160"
    name = "uneven-shard-at-scale"
    severity = Severity.ERROR
    INVALID = ("""
        shard = Subset(train_set, range(rank, len(train_set), world_size))  # 1000 samples, 512 ranks
        loader = DataLoader(shard, batch_size=2)  # ranks 488-511 get one batch fewer
    """,)
    VALID = ("""
        sampler = DistributedSampler(train_set)  # every rank the same number of samples
        loader = DataLoader(train_set, batch_size=2, sampler=sampler)
    """,)


class CollectivesDifferAtScale(RehearsalCheck):
    """At this world size the rehearsed ranks make a different number or order of collectives.

    ## Why it matters

    Collectives match by order: when rank 0 makes an all-reduce that rank 511 does not (a branch
    on the rank, on a per-rank count, on the world size), the job hangs or combines unrelated
    tensors. On a small job the branch may be taken by every rank alike; at scale it is not.
    The rehearsal records every collective of each rehearsed rank (yours and DDP's, with shapes)
    in the same ledger as a real run and compares the ranks that ran to the same point.

    ## How to fix

    Make every rank call the same collectives in the same order: move rank-dependent work around
    the collective (compute on every rank, print on rank 0), and make loop counts that contain
    collectives the same on every rank.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#collective-functions
    """

    code = "DDP161"
    name = "collectives-differ-at-scale"
    severity = Severity.ERROR
    INVALID = ("""
        if rank < 256:
            dist.all_reduce(stats)  # ranks 256+ never enter it at 512 ranks
    """,)
    VALID = ("""
        dist.all_reduce(stats)  # every rank, then decide what to print
        if rank == 0:
            print(stats)
    """,)


class FailsAtWorldSize(RehearsalCheck):
    """The script fails at this world size: an assertion, a division by zero or a count that
    becomes zero in a formula of the world size.

    ## Why it matters

    Batch and accumulation formulas written for one node stop working at scale:
    `grad_accum = total_batch // (micro_batch * world_size)` is 0 once the world is larger than
    `total_batch / micro_batch`, and then `step % grad_accum` divides by zero, an `assert` fails, or
    the optimizer never steps. On a cluster this is found after the job leaves the queue; the
    rehearsal runs the representative ranks with the world size set and names the line.

    ## How to fix

    Guard the formula for the sizes you will launch at (`max(1, ...)`, or fail early with a
    message that says which world sizes are supported), or derive the per-rank batch from the
    global batch and the world size so that it never reaches zero.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP162"
    name = "fails-at-world-size"
    severity = Severity.ERROR
    INVALID = ("""
        grad_accum = total_batch // (micro_batch * world_size)  # 0 at 64 ranks
        assert grad_accum > 0
    """,)
    VALID = ("""
        grad_accum = max(1, total_batch // (micro_batch * world_size))
    """,)


class EmptyEvalShardAtScale(RehearsalCheck):
    """At this world size an evaluation loader gives some ranks nothing.

    ## Why it matters

    An evaluation set is often small: 500 validation samples split over 512 ranks leave 12 ranks
    without a single sample. Those ranks then divide by a count of zero, report NaN, or skip the
    evaluation's collectives while the others wait for them. The rehearsal reads each evaluation
    loader's length on the representative ranks, and computes every rank's share of a
    `DistributedSampler` from its parameters.

    ## How to fix

    Evaluate on fewer ranks than samples (or on rank 0 alone, then broadcast), pad the split so
    that every rank gets one batch, or guard the per-rank average (`max(count, 1)`) and reduce
    sums and counts rather than averages.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP163"
    name = "empty-eval-shard-at-scale"
    severity = Severity.ERROR
    INVALID = ("""
        val_shard = Subset(val_set, range(rank, len(val_set), world_size))  # empty past rank 499
        mean_loss = total_loss / len(val_loader)  # ZeroDivisionError there
    """,)
    VALID = ("""
        totals = torch.tensor([total_loss, count])
        dist.all_reduce(totals)  # sums and counts over every rank
        mean_loss = totals[0] / totals[1].clamp(min=1)
    """,)


class LearningRateAtScale(RehearsalCheck):
    """At this world size the learning rate has grown far beyond the one-rank value.

    ## Why it matters

    `lr = base_lr * world_size` is the linear scaling rule, and it holds only up to a point (Goyal
    et al. trained with it up to a global batch of 8k, with a warm-up). At 512 ranks the rule
    multiplies the learning rate by 512: training diverges in the first steps, after the job
    has waited for its GPUs. The rehearsal compares the learning rate each rehearsed world size's
    optimizer is given with that of one rank, and reports a growth past 32×.

    ## How to fix

    Cap the growth (`base_lr * min(world_size, 32)`), use the square-root rule for Adam-type
    optimizers, keep the global batch fixed by shrinking the per-rank batch, or use an optimizer
    made for large batches (LARS, LAMB) with a warm-up.

    ## References

    - https://arxiv.org/abs/1706.02677
    - https://arxiv.org/abs/1904.00962
    """

    code = "DDP164"
    name = "learning-rate-at-scale"
    severity = Severity.WARNING
    hint = "cap the learning rate's growth with the world size, with a warm-up"
    INVALID = ("""
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * world_size)  # 51.2 at 512 ranks
    """,)
    VALID = ("""
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * min(world_size, 32))
    """,)



class RankBlockedAtScale(RehearsalCheck):
    """A rehearsed rank did not get through its bounded steps within the time limit.

    ## Why it matters

    In a rehearsal every collective returns at once, so a rank that stops making progress waits
    for something else: a file another rank should write, a store key, input, an endless loop
    whose bound depends on the rank or the world size. On the cluster it would wait the same way.
    The rehearsal names the line the rank was waiting at when its time ran out.

    ## How to fix

    Look at the named line: make the wait end on every rank (write the file before the barrier,
    bound the loop), or give the wait a timeout.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.monitored_barrier
    """

    code = "DDP166"
    name = "rank-blocked-at-scale"
    severity = Severity.ERROR
    INVALID = ("""
        while not os.path.exists(f"ready-{rank - 1}"):  # rank 0 never writes its file
            time.sleep(1)
    """,)
    VALID = ("""
        dist.barrier()  # every rank arrives, or the collective times out and says so
    """,)


NAME = "rehearsal"


def judge(records: list[Any], ctx: Context) -> list[Verdict]:
    """An ordinary run rehearses nothing: these codes come from `--rehearse` only."""
    return []


PROBE = Probe(NAME, (UnevenShardAtScale, CollectivesDifferAtScale, FailsAtWorldSize, EmptyEvalShardAtScale,
                     LearningRateAtScale, RankBlockedAtScale), judge, None, order=1100)
