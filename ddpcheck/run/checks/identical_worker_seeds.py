from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class IdenticalWorkerSeeds(RuntimeCheck):
    """The DataLoader workers of every rank got the same seeds, and `__getitem__` draws random numbers.

    ## Why it matters

    Each multi-process DataLoader iterator draws a base seed from the loader's `generator`, or from
    the rank's global torch generator when it has none, and seeds worker k's `random`, `torch` and
    `numpy.random` from `base_seed + k` (torch 2.13, `torch/utils/data/_utils/worker.py`). A script
    that calls `torch.manual_seed(S)` with the same S on every rank gives every rank the same base
    seed, so worker k of every rank makes the same random augmentation choices: the global batch
    holds each augmentation world-size times. ddpcheck compares the base seeds across ranks and
    checks, in each worker, whether the first fetches drew from the global generators.

    ## How to fix

    Seed each rank differently, `torch.manual_seed(S + rank)`; DDP copies rank 0's parameters and
    buffers to every rank when it wraps the model, so the initial weights stay identical. Or give
    the DataLoader its own generator: `generator=torch.Generator().manual_seed(S + rank)`.

    ## References

    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/randomness.html
    """

    code = "DDP148"
    name = "identical-worker-seeds"
    severity = Severity.WARNING
    BAD = """
        torch.manual_seed(42)  # the same on every rank
        loader = DataLoader(augmented, batch_size=64, sampler=DistributedSampler(augmented), num_workers=4)
    """
    GOOD = """
        torch.manual_seed(42 + dist.get_rank())
        loader = DataLoader(augmented, batch_size=64, sampler=DistributedSampler(augmented), num_workers=4)
    """
