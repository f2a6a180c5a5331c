from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class UnfinishedReduction(RuntimeCheck):
    """DDP failed with "Expected to have finished reduction in the prior iteration": the parameters
    that got no gradient, by name.

    ## Why it matters

    Without `find_unused_parameters=True`, DDP waits for a gradient of every parameter in each
    backward before it all-reduces the last bucket. A parameter the loss does not depend on (an
    auxiliary head, a branch taken only sometimes, a frozen-by-accident layer) leaves the reduction
    unfinished, and the next forward raises this error. DDP's message lists the parameters by
    *index* only (names need `TORCH_DISTRIBUTED_DEBUG=INFO` and a rerun); ddpcheck maps the
    indices to names in DDP's own order on the spot.

    ## How to fix

    Make the named parameters take part in the loss, or remove them, or freeze them
    (`requires_grad_(False)`) before wrapping the model in DDP. If they are used in some steps and
    not in others, pass `find_unused_parameters=True`.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP146"
    name = "unfinished-reduction"
    severity = Severity.ERROR
    BAD = """
        def forward(self, x):
            features = self.backbone(x)
            return self.head(features), self.aux_head(features.detach())  # aux loss never computed
    """
    GOOD = """
        def forward(self, x):
            return self.head(self.backbone(x))  # aux_head removed (or passed to the loss)
    """
