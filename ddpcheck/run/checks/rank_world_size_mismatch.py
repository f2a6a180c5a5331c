from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class RankWorldSizeMismatch(RuntimeCheck):
    """`init_process_group(rank=..., world_size=...)` disagrees with the launcher's RANK/WORLD_SIZE.

    ## Why it matters

    The launcher assigns each process its global RANK and the WORLD_SIZE. Explicit values that
    disagree (LOCAL_RANK passed as rank on several nodes, a hard-coded world size) make the
    rendezvous wait for ranks that never come, or two processes claim one rank. ddpcheck uses the
    launcher's values so the run goes on, and reports it.

    ## How to fix

    Leave `rank` and `world_size` out of `init_process_group()` under torchrun, or read them from
    `os.environ["RANK"]` and `os.environ["WORLD_SIZE"]`.

    ## References

    - https://pytorch.org/docs/stable/elastic/run.html#environment-variables
    """

    code = "DDP114"
    name = "rank-world-size-mismatch"
    severity = Severity.ERROR
    BAD = """
        dist.init_process_group("gloo", rank=int(os.environ["LOCAL_RANK"]), world_size=2)
    """
    GOOD = """
        dist.init_process_group("gloo")
    """
