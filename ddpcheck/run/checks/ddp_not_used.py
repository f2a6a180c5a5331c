from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class DDPNotUsed(RuntimeCheck):
    """A process group exists but no DistributedDataParallel model was trained through.

    ## Why it matters

    DDP synchronises gradients inside the wrapper's forward and backward. A loop that calls the
    original module (`model(x)` instead of `ddp_model(x)`, or `ddp_model.module(x)`), or a script
    that never wraps the model, never all-reduces anything: every rank trains alone and the
    replicas drift apart from the first step. ddpcheck reports it once here; the gradient and
    parameter differences that follow from it are folded into this finding.

    ## How to fix

    Wrap the model once, `ddp_model = DDP(model)`, and call `ddp_model(x)` in the training loop.

    ## References

    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP109"
    name = "ddp-not-used"
    severity = Severity.ERROR
    BAD = """
        ddp_model = DDP(model)
        for x, y in loader:
            loss = loss_fn(model(x), y)  # the unwrapped module
            loss.backward()
    """
    GOOD = """
        ddp_model = DDP(model)
        for x, y in loader:
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
    """
