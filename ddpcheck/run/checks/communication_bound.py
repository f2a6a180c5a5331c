from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class CommunicationBound(RuntimeCheck):
    """A large share of every step is DDP's gradient reduction that backward does not hide.

    ## Why it matters

    DDP overlaps the all-reduce of each gradient bucket with the rest of backward. What is left
    after the last gradient is computed is pure waiting. ddpcheck reads DDP's own timers
    (`_get_ddp_logging_data()`: the reduction's time and its overlap with backward compute, sampled
    by DDP) and reports the exposed part when it is 40 % of the median step or more and no
    straggler explains it.

    ## How to fix

    Make fewer, larger all-reduces: a larger `bucket_cap_mb`; accumulate gradients over several
    micro-batches with `no_sync()` so the reduction runs once per optimizer step; a larger per-rank
    batch (more compute per byte sent). On a slow network a compression hook
    (`register_comm_hook` with `fp16_compress_hook` / `bf16_compress_hook`) halves the bytes.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/docs/stable/ddp_comm_hooks.html
    """

    code = "DDP142"
    name = "communication-bound"
    severity = Severity.INFO
    BAD = """
        model = DDP(model)
        for x, y in loader:  # a small model and batch: every step waits for the all-reduce
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    GOOD = """
        model = DDP(model, bucket_cap_mb=100)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accumulate == 0
            with contextlib.nullcontext() if last else model.no_sync():
                loss_fn(model(x), y).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    """
