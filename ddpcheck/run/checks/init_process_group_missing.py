from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class InitProcessGroupMissing(RuntimeCheck):
    """The script ran on several ranks but never called `init_process_group`.

    ## Why it matters

    Launched by torchrun, each process only learns about the others through
    `torch.distributed.init_process_group()`. Without it there is no communication at all: every
    process trains its own model on its own data and the results are N unrelated runs.

    ## How to fix

    Call `torch.distributed.init_process_group()` once at start-up (torchrun provides the
    rendezvous through the environment), then wrap the model in `DistributedDataParallel`.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group
    """

    code = "DDP108"
    name = "init-process-group-missing"
    severity = Severity.ERROR
    BAD = """
        model = Net()
        for x, y in loader:
            ...
    """
    GOOD = """
        dist.init_process_group("gloo")
        model = DDP(Net())
        for x, y in loader:
            ...
    """
