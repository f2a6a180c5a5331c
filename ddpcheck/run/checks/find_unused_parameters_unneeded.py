from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class FindUnusedParametersUnneeded(RuntimeCheck):
    """`find_unused_parameters=True`, but every parameter got a gradient in every step.

    ## Why it matters

    With `find_unused_parameters=True`, DDP walks the autograd graph from the forward's outputs
    after every forward (`DistributedDataParallel._post_forward` calls
    `reducer.prepare_for_backward(outputs)`) to find parameters that will get no gradient, and its
    reducer keeps track of them during backward. When every parameter takes part in every step
    this is work for nothing. ddpcheck watches, during the first checked steps, whether each
    parameter of the DDP model received a gradient in each step on each rank, and times the walk;
    the finding gives its measured cost per forward and its share of the median step.

    ## How to fix

    Drop the flag (`find_unused_parameters=False` is the default). If some parameters are unused
    in every step, freeze or remove them instead; keep the flag only when the set of used
    parameters changes from step to step.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP144"
    name = "find-unused-parameters-unneeded"
    severity = Severity.WARNING
    BAD = """
        model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)  # all params used
    """
    GOOD = """
        model = DDP(model, device_ids=[local_rank])
    """
