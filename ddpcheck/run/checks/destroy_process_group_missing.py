from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class DestroyProcessGroupMissing(RuntimeCheck):
    """The script exits without calling `destroy_process_group()`.

    ## Why it matters

    Measured with torch 2.13 and gloo: without `destroy_process_group()` a rank dies of SIGABRT
    ("terminate called without an active exception") at interpreter exit in up to half of the
    runs, after training has finished, and torchrun then reports the whole job as failed. (Under
    ddpcheck the ranks exit through a path that avoids this, so the run itself is not affected.)

    ## How to fix

    Call `torch.distributed.destroy_process_group()` at the end of training, on every rank.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#shutdown
    """

    code = "DDP111"
    name = "destroy-process-group-missing"
    severity = Severity.WARNING
    BAD = """
        dist.init_process_group("gloo")
        train()
    """
    GOOD = """
        dist.init_process_group("gloo")
        train()
        dist.destroy_process_group()
    """
