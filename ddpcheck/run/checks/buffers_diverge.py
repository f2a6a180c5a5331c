from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class BuffersDiverge(RuntimeCheck):
    """Module buffers differ across ranks at a forward, and DDP does not broadcast them.

    ## Why it matters

    With `broadcast_buffers=False` (`forward_sync_buffers=False` from torch 2.13), DDP leaves buffers (BatchNorm statistics, masks, EMA state)
    alone, so rank-local updates make the ranks run different models, and evaluation on rank 0
    uses statistics the others never had. With the default `broadcast_buffers=True`, DDP copies
    rank 0's buffers at every forward and this check does not apply.

    ## How to fix

    Keep `broadcast_buffers=True`, convert BatchNorm with `nn.SyncBatchNorm.convert_sync_batchnorm`,
    or all-reduce the buffers yourself before they are used.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP107"
    name = "buffers-diverge"
    severity = Severity.ERROR
    BAD = """
        model = DDP(model, broadcast_buffers=False)
        if dist.get_rank() == 0:
            model.module.mask.fill_(0)
    """
    GOOD = """
        model = DDP(model)  # broadcast_buffers=True: rank 0's buffers at every forward
    """
