from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class OverlappingShards(RuntimeCheck):
    """Ranks draw the same dataset indices although a DistributedSampler is used.

    ## Why it matters

    A `DistributedSampler` built with the wrong `num_replicas` or `rank` (hard-coded, or taken
    from `LOCAL_RANK` on several nodes) gives several ranks the same shard: those samples count
    twice per epoch and others never appear. DistributedSampler's own padding (it repeats
    `(-len(dataset)) % world_size` indices when `drop_last=False`) is expected and not reported.

    ## How to fix

    Build the sampler with the defaults, which read the process group, or with
    `num_replicas=dist.get_world_size(), rank=dist.get_rank()`.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP101"
    name = "overlapping-shards"
    severity = Severity.ERROR
    BAD = """
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    """
    GOOD = """
        sampler = DistributedSampler(dataset)  # world size and rank from the process group
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    """
