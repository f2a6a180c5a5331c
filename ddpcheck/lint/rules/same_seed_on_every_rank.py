from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve, is_rank_value
from ddpcheck.lint.model.ddp import feed
from ddpcheck.lint.model.syntax import children, int_value
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._argparse import int_default


class SameSeedOnEveryRank(Rule):
    """`torch.manual_seed(<constant>)` on every rank: the DataLoader workers of every rank draw the same random augmentation.

    In torch 2.13 a DataLoader iterator takes its workers' base seed from torch's default
    generator (`torch.empty((), dtype=torch.int64).random_()` in `dataloader.py`), and worker k
    seeds `random`, `numpy.random` and torch with `base_seed + k`. After the same
    `torch.manual_seed(42)` on every rank, the base seeds are equal: worker k of rank 0 and worker
    k of rank 1 produce the same random numbers, and with `num_workers=0` the ranks' main
    processes do. Dropout masks follow the same generator.

    ## Why it matters
    The ranks read different samples (the DistributedSampler shards them) but apply the same
    random crops, flips, masks and noise in the same order, so a global batch of N × B samples
    carries only B draws of augmentation: less regularisation than the same batch on one GPU,
    and nothing fails. Off by default and informational: seeding identically is sometimes
    deliberate, and the effect is a loss of diversity, not wrong gradients.

    Reported at a `torch.manual_seed(...)` call (also `torch.random.manual_seed`) that runs on
    every rank of a file whose DataLoader uses a DistributedSampler, when the seed is a literal or
    a command-line option with a literal default, and nothing in it comes from the rank.

    ## How to fix
    Offset the seed by the rank: `torch.manual_seed(args.seed + rank)` (and the same for `random`
    and `numpy`). DDP broadcasts rank 0's parameters when it wraps the model, so the replicas
    still start identical. The DistributedSampler has its own `seed`, which must stay the same on
    every rank. When the same seed is needed to build the same synthetic dataset on every rank,
    seed again with the rank once it is built (`# noqa: DDP029` on the first call says so).

    ## References
    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/randomness.html
    - https://github.com/huggingface/pytorch-image-models/issues/1519 (why timm seeds each rank
      differently: "we want the dataloader workers on each node to have different augmentations")
    """

    code = "DDP029"
    name = "same-seed-on-every-rank"
    severity = Severity.INFO
    default_enabled = False
    MESSAGE = (
        "every rank seeds torch with the same `{seed}`: the DataLoader workers of every rank draw the "
        "same augmentation (and dropout masks); offset the seed by the rank"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.manual_seed(args.seed + rank)
        loader = DataLoader(train_set, sampler=DistributedSampler(train_set, seed=args.seed), num_workers=8)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import argparse
            import torch
            import torch.distributed as dist
            from torch.utils.data import DataLoader, DistributedSampler

            parser = argparse.ArgumentParser()
            parser.add_argument("--seed", type=int, default=42)
            args = parser.parse_args()
            dist.init_process_group("nccl")
            torch.manual_seed(args.seed)
            loader = DataLoader(train_set, sampler=DistributedSampler(train_set), num_workers=8)
            """,
            lines=(10,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        if not any(model.api(s) == api.DATALOADER and feed(model, s) is not None for s in model.root.calls):
            return
        resolve = model.resolver_for(model.root)
        for site in model.root.calls:
            if model.api(site) not in _SEEDERS:
                continue
            seed = site.arg("seed", 0)
            if seed is None or model.paths.rank_guard(site) is not None:
                continue
            if _mentions_rank(seed, resolve):
                continue
            values = model.values.at_call(site, seed)
            if values and all(self._constant(v, resolve) for v in values):
                self.report(site.node, self.MESSAGE.format(seed=model.text_of(model.root, seed)))

    def _constant(self, value: Value, resolve: Resolve) -> bool:
        node = value.node
        if not isinstance(node, cst.BaseExpression):
            return False
        if int_value(node) is not None:
            return True
        # A command-line option (`args.seed` with a literal default) is the same on every rank.
        return int_default(value.module, node) is not None


_SEEDERS = frozenset({"torch.manual_seed", "torch.random.manual_seed"})


def _mentions_rank(expr: cst.CSTNode, resolve: Resolve) -> bool:
    if isinstance(expr, cst.BaseExpression) and is_rank_value(expr, resolve):
        return True
    return any(_mentions_rank(child, resolve) for child in children(expr))
