from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class GradientsDiffer(RuntimeCheck):
    """Gradients differ across ranks at an optimizer step, after DDP's all-reduce.

    ## Why it matters

    DDP all-reduces gradients during backward, so at `optimizer.step()` every rank must hold
    bitwise the same gradients (measured with gloo: always identical). If they differ, the ranks
    apply different updates and the replicas drift apart silently. Causes: a rank-dependent edit
    or scaling of `.grad` after backward, clipping by a rank-local norm, `no_sync()` around every
    backward, or a model trained outside its DDP wrapper. ddpcheck fingerprints every gradient
    (crc32 of its bytes) in the global optimizer step pre-hook and names the first step and the
    parameters that differ; a gradient that is None on some ranks only is reported too.

    ## How to fix

    Make every change to `.grad` identical on all ranks (or do it before backward), and let the last
    micro-batch of each accumulation window run outside `no_sync()`.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
    """

    code = "DDP105"
    name = "gradients-differ"
    severity = Severity.ERROR
    BAD = """
        for x, y in loader:
            with ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()
            optimizer.step()
    """
    GOOD = """
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accumulate == 0
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    """
