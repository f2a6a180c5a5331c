from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.context import CallSite
from ddpcheck.lint.patterns import is_constant, is_world_size_expr
from ddpcheck.lint.rule import Rule

_ZERO = "torch.distributed.optim.ZeroRedundancyOptimizer"
# A batch size or accumulation count divided by the number of ranks (`grad_accum //= world_size`,
# `batch_size // dist.get_world_size()`): the script holds the global batch fixed, so a constant
# learning rate is right.
_DIVIDES_BY_WORLD = re.compile(
    r"(?:batch|accum|micro)\w*\)?\s*//?=?\s*\(?\s*"
    r"(?:[\w.]*(?:world_size|ngpus_per_node|num_gpus|n_gpus?|ngpus|nprocs|num_replicas)\b"
    r"|[\w.]*get_world_size\(\))"
)


class UnscaledLearningRate(Rule):
    """An optimizer in a DDP script gets a hard-coded learning rate that ignores the world size.

    ## Why it matters
    With DDP each rank takes its own batch, so one optimizer step consumes
    `batch_size × world_size` samples: the global batch grows with the number of GPUs while the
    learning rate stays what it was on one GPU. Training takes N× fewer steps per epoch at the
    same step size; users see a job on 8 GPUs converge more slowly per epoch, and reach a worse
    final accuracy, than the single-GPU run they started from. The linear scaling rule (Goyal et
    al., 2017) keeps the per-sample progress: `lr = base_lr × global_batch / base_batch`, usually
    with a few epochs of warm-up. (Adaptive optimizers such as Adam are often scaled by the square
    root instead; either way the learning rate should be a decision about the global batch.)

    Reported only where the value is visibly a constant — a number literal, or a name assigned
    only from number literals — and nothing in it or in the names it comes from mentions the
    world size (`get_world_size()`, `WORLD_SIZE`, `world_size`, `ngpus`, a global batch size).
    A learning rate read from the command line, a config, the environment or a function
    parameter is a deliberate choice and is not reported; neither is an optimizer left at its
    default `lr`, nor a script that holds the global batch fixed by dividing by the world size
    (`grad_accum_steps //= world_size`, `batch_size // dist.get_world_size()`, nanoGPT-style). Severity is info: a rate tuned for the global batch at a fixed world size is
    fine, and this rule cannot know that.

    ## How to fix
    Scale by the world size: `lr = base_lr * dist.get_world_size()` (equivalently
    `base_lr * global_batch / base_batch`), or make the learning rate a command-line or config
    value tuned for the global batch.

    ## References
    - https://arxiv.org/abs/1706.02677 (Goyal et al., Accurate, Large Minibatch SGD)
    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://github.com/pytorch/examples/blob/main/imagenet/main.py
    """

    code = "DDP004"
    name = "unscaled-learning-rate"
    severity = Severity.INFO
    MESSAGE = (
        "learning rate is a constant that ignores the world size: with N ranks the global batch is "
        "N× larger; scale it by the linear scaling rule lr = base_lr × global_batch / base_batch "
        "(e.g. `base_lr * dist.get_world_size()`) or read it from the command line or config"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        """,
        """
        # Through names: the rate comes from the global batch.
        import os
        from torch.optim import AdamW
        from torch.nn.parallel import DistributedDataParallel as DDP
        world_size = int(os.environ["WORLD_SIZE"])
        base_lr, base_batch = 0.1, 256
        global_batch = 64 * world_size
        lr = 0.1 * global_batch / 256
        opt = AdamW(DDP(model).parameters(), lr=lr)
        """,
        """
        # From the command line, a config, or a parameter: a deliberate choice.
        import argparse
        import torch
        import torch.distributed as dist
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.01)
        args = parser.parse_args()
        dist.init_process_group("gloo")
        a = torch.optim.SGD(params, lr=args.lr)
        b = torch.optim.Adam(params, lr=config["optim"]["lr"])
        def build(params, lr=0.01):
            return torch.optim.SGD(params, lr=lr)
        """,
        """
        # The environment variable, read in a helper name.
        import os, torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        scaled = 0.01 * float(os.environ.get("WORLD_SIZE", 1))
        opt = torch.optim.SGD(params, scaled)
        """,
        """
        # Not a DDP script.
        import torch
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        """,
        """
        # The global batch is held fixed: fewer accumulation steps per rank.
        import os, torch
        ddp_world_size = int(os.environ["WORLD_SIZE"])
        torch.distributed.init_process_group("nccl")
        gradient_accumulation_steps = 40
        gradient_accumulation_steps //= ddp_world_size
        learning_rate = 6e-4
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        """,
    ]
    INVALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        """,
        """
        # A positional rate through a constant name, a deep import path.
        from torch.optim.adamw import AdamW as Opt
        from torch.nn.parallel import DistributedDataParallel as DDP
        LR = 3e-4
        model = DDP(model)
        opt = Opt(model.parameters(), LR)
        """,
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._candidates: list[cst.BaseExpression] = []

    def on_call(self, call: CallSite) -> None:
        q = call.qualname
        if q is None:
            return
        if q == _ZERO:
            lr = call.arg("lr")
        elif q.startswith("torch.optim.") and q.count(".") == 2 and q[12:13].isupper() and q != "torch.optim.Optimizer":
            lr = call.arg("lr", 1)
        else:
            return
        if lr is not None and is_constant(lr, call.scope) and not is_world_size_expr(self.ctx, lr, call.scope):
            self._candidates.append(lr)

    def finish(self) -> None:
        if self._candidates and self.ctx.uses_ddp and not _DIVIDES_BY_WORLD.search(self.ctx.source):
            for lr in self._candidates:
                self.report(lr)
