from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class MissingSetEpoch(RuntimeCheck):
    """A shuffling DistributedSampler yields the same order every epoch: `set_epoch` is not called.

    ## Why it matters

    `DistributedSampler` seeds its shuffle with `seed + epoch`, and its epoch only changes through
    `set_epoch()`. Without the call every epoch replays the first permutation, so the model sees
    the batches in the same order each epoch, which hurts convergence quietly. ddpcheck compares
    the index order of consecutive epochs.

    ## How to fix

    Call `loader.sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP103"
    name = "missing-set-epoch"
    severity = Severity.WARNING
    BAD = """
        for epoch in range(epochs):
            for x, y in loader:
                ...
    """
    GOOD = """
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """
