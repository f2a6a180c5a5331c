from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class CudaDeviceMismatch(RuntimeCheck):
    """Several ranks on one machine put their DDP model on the same GPU.

    ## Why it matters

    Each rank needs its own GPU (`cuda:LOCAL_RANK`). Ranks that share one (a hard-coded
    `cuda:0`, or `set_device` never called) fight for its memory, run several times slower, and
    with NCCL may hang or fail with "Duplicate GPU detected".

    ## How to fix

    At start-up call `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` and build the model on
    that device; pass `device_ids=[local_rank]` to DDP.

    ## References

    - https://pytorch.org/docs/stable/elastic/run.html
    """

    code = "DDP110"
    name = "cuda-device-mismatch"
    severity = Severity.ERROR
    BAD = """
        model = Net().cuda(0)
        ddp_model = DDP(model, device_ids=[0])
    """
    GOOD = """
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        ddp_model = DDP(Net().cuda(local_rank), device_ids=[local_rank])
    """
