from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class IdenticalInputs(RuntimeCheck):
    """Several ranks feed the same inputs to the DDP model.

    ## Why it matters

    Disjoint sampler indices do not prove different data: an `IterableDataset` that does not split
    its stream by rank, or synthetic inputs drawn from a generator seeded the same on every rank,
    give every rank the same batch. The ranks then compute the same gradients and the extra
    processes add nothing. ddpcheck fingerprints what the DDP model's forward receives at checked
    steps and reports ranks that saw identical inputs at most of them.

    ## How to fix

    Shard the data by rank: a `DistributedSampler`, or in an `IterableDataset` skip samples by
    `dist.get_rank()` / `get_worker_info()`; seed per-rank random inputs with `seed + rank`.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset
    """

    code = "DDP104"
    name = "identical-inputs"
    severity = Severity.ERROR
    BAD = """
        class Stream(IterableDataset):
            def __iter__(self):
                yield from read_all_samples()  # every rank reads the whole stream
    """
    GOOD = """
        class Stream(IterableDataset):
            def __iter__(self):
                rank, world = dist.get_rank(), dist.get_world_size()
                for i, sample in enumerate(read_all_samples()):
                    if i % world == rank:
                        yield sample
    """
