from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class MissingDistributedSampler(RuntimeCheck):
    """Every rank reads the same samples because the DataLoader has no DistributedSampler.

    ## Why it matters

    Each DDP rank runs its own DataLoader. Without a `DistributedSampler` every rank draws from
    the whole dataset, so N ranks train N times on the same data: the job is no faster than one
    process and an "epoch" is N epochs. ddpcheck records the indices each rank's loader takes from
    its sampler and finds them shared across ranks.

    ## How to fix

    Pass `sampler=DistributedSampler(dataset)` to the DataLoader (and drop `shuffle=True`; the
    sampler shuffles), and call `sampler.set_epoch(epoch)` every epoch.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP100"
    name = "missing-distributed-sampler"
    severity = Severity.ERROR
    BAD = """
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        model = DDP(model)
        for x, y in loader:
            ...
    """
    GOOD = """
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        model = DDP(model)
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """
