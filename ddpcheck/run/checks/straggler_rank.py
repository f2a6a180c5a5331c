from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class StragglerRank(RuntimeCheck):
    """One rank is clearly slower than the others, and every other rank waits for it.

    ## Why it matters

    DDP all-reduces the gradients inside `backward()`, so every step ends at the pace of the slowest
    rank: a rank that spends 80 ms more per step makes every rank's step 80 ms longer, and the
    others spend that time waiting inside the reduction. ddpcheck times each rank's steps from
    hooks (waiting for the DataLoader, DDP's forward, `backward()` with the reduction, the
    optimizer step, the script's own collectives, and the rest) and compares each rank's own
    phases, leaving out the phases where ranks wait for each other, with the median of the other
    ranks. A rank whose excess is at least 20 % of the others' median step (and 5 ms) is
    reported with the phase it comes from.

    ## How to fix

    Look at what that rank does differently in the named phase: `other` is code in your loop that
    runs on that rank only (rank-0 logging, evaluation or checkpoint writing each step: do it every
    N steps or outside the step); `data` is a slower input pipeline for that rank's shard; `forward`
    or `backward` point at its device (another process on it, throttling) or larger inputs.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP140"
    name = "straggler-rank"
    severity = Severity.WARNING
    BAD = """
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0:
                writer.add_histogram("weights", flat_weights(model), step)  # every step, rank 0 only
    """
    GOOD = """
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 500 == 0:
                writer.add_histogram("weights", flat_weights(model), step)
    """
