from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class HardcodedInitMethod(RuntimeCheck):
    """`init_process_group(init_method="tcp://...")` is hard-coded in a script run by a launcher.

    ## Why it matters

    Under torchrun every rank connects to the launcher's store; a `tcp://host:port` of the
    script's own makes each rank wait for a store nobody serves, and the job hangs for the store
    timeout (30 minutes) unless the port happens to be the launcher's. ddpcheck rewrites it to
    `env://` so the run goes on, and reports it.

    ## How to fix

    Call `init_process_group(backend)` without `init_method` (the default `env://` reads
    MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE that the launcher sets).

    ## References

    - https://pytorch.org/docs/stable/distributed.html#tcp-initialization
    - https://pytorch.org/docs/stable/elastic/run.html
    """

    code = "DDP113"
    name = "hardcoded-init-method"
    severity = Severity.ERROR
    BAD = """
        dist.init_process_group("gloo", init_method="tcp://10.0.0.1:23456",
                                rank=rank, world_size=world_size)
    """
    GOOD = """
        dist.init_process_group("gloo")
    """
