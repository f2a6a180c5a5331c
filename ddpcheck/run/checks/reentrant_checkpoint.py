from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class ReentrantCheckpoint(RuntimeCheck):
    """Reentrant activation checkpointing broke DDP: it is named as the cause of the failure it made.

    ## Why it matters

    `torch.utils.checkpoint.checkpoint` with `use_reentrant=True` (what torch 2.13 uses when the
    argument is not given, with a warning) runs the checkpointed forward under `no_grad` and runs it
    again inside backward. DDP does not expect that: when no input of the checkpointed function
    requires grad (the first block of a network, fed the data batch) the parameters inside get no
    gradient, DDP's reduction of that step never completes, the other gradients are not
    synchronised (they differ across ranks) and the next forward fails with "Expected to have
    finished reduction in the prior iteration"; when the same parameters go through two reentrant
    backwards (a block checkpointed twice, or `find_unused_parameters=True`, whose graph walk
    cannot see inside the checkpoint) DDP raises "Expected to mark a variable ready only once".
    ddpcheck records each reentrant checkpoint call made while a DDP model exists (its line,
    whether an input required grad, the parameters inside, repeats within a step) and, when the run
    shows the damage, reports the checkpoint as the cause in place of the gradient mismatch or the
    unused-parameter finding it explains.

    ## How to fix

    Pass `use_reentrant=False`: the non-reentrant implementation works with DDP as is, including
    unused parameters and repeated checkpoints. Otherwise make an input of the checkpointed
    function require grad, and for a block checkpointed twice use `DDP(..., static_graph=True)`.

    ## References

    - https://pytorch.org/docs/stable/checkpoint.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://github.com/pytorch/pytorch/issues/84589
    - https://github.com/huggingface/accelerate/issues/389
    """

    code = "DDP145"
    name = "reentrant-checkpoint-breaks-ddp"
    severity = Severity.ERROR
    BAD = """
        def forward(self, images):
            h = checkpoint(self.stem, images)  # use_reentrant not given: reentrant; images need no grad
            return self.head(checkpoint(self.body, h))
    """
    GOOD = """
        def forward(self, images):
            h = checkpoint(self.stem, images, use_reentrant=False)
            return self.head(checkpoint(self.body, h, use_reentrant=False))
    """
