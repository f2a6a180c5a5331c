from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class ParametersDiverge(RuntimeCheck):
    """Model parameters differ across ranks after an optimizer step or at the end of the run.

    ## Why it matters

    DDP keeps replicas identical only if every rank applies the same update. A weight edited on
    some ranks only (outside the optimizer, e.g. `if rank == 0: p.add_(...)`, a rank-local EMA or
    target-network update written into the model) makes the replicas drift; the checkpoint saved
    on rank 0 then is not what the other ranks trained. ddpcheck fingerprints the parameters after
    checked steps (global optimizer post-step hook) and at the end.

    ## How to fix

    Change weights only through the optimizer, identically on every rank; if one rank must edit
    them, broadcast them from that rank afterwards (`dist.broadcast(p, src=0)`).

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP106"
    name = "parameters-diverge"
    severity = Severity.ERROR
    BAD = """
        optimizer.step()
        if dist.get_rank() == 0:
            with torch.no_grad():
                model.head.bias.add_(0.01)
    """
    GOOD = """
        optimizer.step()
        with torch.no_grad():
            model.head.bias.add_(0.01)  # the same edit on every rank
    """
