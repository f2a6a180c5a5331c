from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class UnusedParameters(RuntimeCheck):
    """Parameters of the DDP model that never received a gradient on any rank.

    ## Why it matters

    Without `find_unused_parameters=True`, DDP fails at the next step when a parameter gets no
    gradient; with it, DDP walks the autograd graph every step to find them, which costs time.
    Parameters that are never used also cost memory and optimizer state. ddpcheck watches which
    parameters autograd accumulates a gradient into during the first checked steps.

    ## How to fix

    Remove the unused parameters, or freeze them (`p.requires_grad_(False)`) before wrapping the
    model in DDP; then `find_unused_parameters` can stay False.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP112"
    name = "unused-parameters"
    severity = Severity.WARNING
    BAD = """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
                self.aux_head = nn.Linear(8, 2)  # never called in forward
    """
    GOOD = """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
    """
