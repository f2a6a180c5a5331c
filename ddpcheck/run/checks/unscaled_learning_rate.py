from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class UnscaledLearningRate(RuntimeCheck):
    """`--scaling`: the learning rate stayed the same while the global batch grew with the world size.

    ## Why it matters

    With a fixed per-rank batch, N ranks train on an N times larger global batch and make N times
    fewer optimizer steps per epoch. Keeping the learning rate of the one-rank run usually trains
    slower and worse; the linear scaling rule (Goyal et al. 2017) multiplies the learning rate by
    the growth of the global batch, with a warm-up (Adam-type optimizers often use the square
    root instead). `ddpcheck run --scaling 1,2,4` runs the script at each world size and reads the
    learning rate each run's optimizer actually used (the largest value of its first param group,
    so a warm-up does not hide it) and the global batch (the samples the loaders yielded per
    optimizer step, all ranks), and reports a learning rate that did not move with the factor it
    should have grown by.

    ## How to fix

    Scale it with the global batch: `lr = base_lr * global_batch / base_batch` (usually
    `base_lr * world_size` with a fixed per-rank batch), with a few epochs of warm-up; or keep the
    global batch fixed by dividing the per-rank batch by the world size.

    ## References

    - https://arxiv.org/abs/1706.02677
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP143"
    name = "unscaled-learning-rate"
    severity = Severity.WARNING
    BAD = """
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # the one-GPU value at any world size
    """
    GOOD = """
        world_size = dist.get_world_size()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * world_size)
    """
