from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class ShardCoverageGap(RuntimeCheck):
    """A complete epoch left samples that no rank drew.

    ## Why it matters

    When every rank finished an epoch, the union of their indices should cover the dataset, up
    to what `drop_last` drops. Missing samples mean the shards do not add up (a sampler split for
    more ranks than run), so part of the data is never trained on.

    ## How to fix

    Give the sampler the real world size (`DistributedSampler(dataset)` reads it from the process
    group); check custom samplers split `len(dataset)` over `get_world_size()` ranks.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP102"
    name = "shard-coverage-gap"
    severity = Severity.WARNING
    BAD = """
        sampler = DistributedSampler(dataset, num_replicas=8, rank=dist.get_rank())  # 4 ranks run
    """
    GOOD = """
        sampler = DistributedSampler(dataset)
    """
