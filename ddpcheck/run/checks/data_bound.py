from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class DataBound(RuntimeCheck):
    """The ranks spend a large share of every step waiting for the DataLoader.

    ## Why it matters

    Time a rank spends in `next(iter(loader))` is time its device sits idle; adding ranks does not
    help when each of them waits for its input pipeline. ddpcheck measures the wait for each batch
    (`DataLoader.__next__`) on every rank and reports it when it takes 40 % of the median step or
    more (over at least 10 timed steps), with the loader's settings.

    ## How to fix

    Give the DataLoader more worker processes (`num_workers`), keep them alive between epochs
    (`persistent_workers=True`) and let them run ahead (`prefetch_factor`); on a GPU also
    `pin_memory=True` with `.to(device, non_blocking=True)`. Move decoding and augmentation that
    need not happen per step into preprocessing.

    ## References

    - https://pytorch.org/docs/stable/data.html#multi-process-data-loading
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    """

    code = "DDP141"
    name = "data-bound"
    severity = Severity.INFO
    BAD = """
        loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images))
    """
    GOOD = """
        loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images),
                            num_workers=8, persistent_workers=True, prefetch_factor=4,
                            pin_memory=True)
    """
