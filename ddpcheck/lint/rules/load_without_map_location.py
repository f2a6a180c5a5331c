from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.conditions import on_main_rank_only, on_single_process_only
from ddpcheck.lint.context import CallSite
from ddpcheck.lint.rule import Invalid, Replace, Rule
from ddpcheck.lint.values import origins


# Paths that name cached data rather than a checkpoint: tensors saved from the CPU.
_DATA_WORDS = re.compile(r"cache|feature|token|vocab|dataset|examples|corpus", re.I)


class LoadWithoutMapLocation(Rule):
    """`torch.load` without `map_location` in a DDP script: every rank loads the tensors onto GPU 0.

    ## Why it matters
    `torch.load` restores each tensor onto the device it was saved from. A checkpoint written by
    rank 0 of a GPU job holds `cuda:0` tensors, so every rank that loads it allocates a full copy
    on GPU 0 before anything is moved. Users see GPU 0 with N times the expected memory in
    `nvidia-smi`, `CUDA out of memory` on GPU 0 only when resuming, and a CUDA context of every
    rank on GPU 0.

    Reported for `torch.load(...)` with neither `map_location=` nor a second positional argument
    (and no `**kwargs`), in a file that uses DDP, unless the load runs on rank 0 only or only in a
    non-distributed run (`if not args.distributed:`), or when the path names cached data rather than
    a checkpoint (`cached_features.pt`, `tokens_cache`), which is saved from the CPU.

    ## How to fix
    Pass `map_location="cpu"` (then `load_state_dict` copies into the model wherever it lives) or
    the rank's own device, `map_location=f"cuda:{local_rank}"`. The fix adds
    `map_location="cpu"`; it is unsafe because code that uses the loaded tensors directly then
    gets CPU tensors.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.load.html
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
    - https://github.com/pytorch/pytorch/issues/23138 (resume from a checkpoint: extra processes on GPU 0)
    - https://github.com/pytorch/examples/issues/1078
    """

    code = "DDP011"
    name = "load-without-map-location"
    severity = Severity.WARNING
    fixable = True
    MESSAGE = (
        "`torch.load` without `map_location`: tensors return to the GPU they were saved from "
        "(usually cuda:0) on every rank; pass `map_location=\"cpu\"` or `map_location=f\"cuda:{local_rank}\"`"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        state = torch.load("ckpt.pt", map_location="cpu")
        other = torch.load("ckpt.pt", {"cuda:0": f"cuda:{local_rank}"})
        """,
        """
        # Loaded on rank 0 only (then broadcast).
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            state = torch.load("ckpt.pt")
        """,
        """
        # Not a DDP script.
        import torch
        state = torch.load("ckpt.pt")
        """,
        """
        # Only a single-process run loads this way.
        import torch
        import torch.distributed as dist
        if world_size == 1:
            state = torch.load("ckpt.pt")
        else:
            dist.init_process_group("nccl")
        """,
        """
        # Cached preprocessing output, saved from the CPU.
        import os, torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        cached_features_file = os.path.join(args.data_dir, "cached_train")
        features = torch.load(cached_features_file)
        """,
        """
        # Options forwarded as **kwargs may carry map_location.
        from torch.nn.parallel import DistributedDataParallel as DDP
        import torch
        model = DDP(model)
        state = torch.load(path, **load_options)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            state = torch.load(args.resume)
            """,
            line=4,
            fixed="""
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            state = torch.load(args.resume, map_location="cpu")
            """,
        ),
        Invalid(
            """
            from torch import load
            from torch.utils.data.distributed import DistributedSampler
            def resume(path):
                return load(path, weights_only=True)
            """,
            fixed="""
            from torch import load
            from torch.utils.data.distributed import DistributedSampler
            def resume(path):
                return load(path, weights_only=True, map_location="cpu")
            """,
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._candidates: list[CallSite] = []

    def on_call(self, call: CallSite) -> None:
        if call.qualname != "torch.load" or call.has_star_kwargs:
            return
        if call.arg("map_location", 1) is not None:
            return
        if on_main_rank_only(call.guards, self.ctx.qualname) or on_single_process_only(call.guards, self.ctx.qualname):
            return
        path = call.arg("f", 0)
        if path is not None and any(
            _DATA_WORDS.search(self.ctx.module.code_for_node(v)) for v in origins(self.ctx, path, call.scope)
        ):
            return
        self._candidates.append(call)

    def finish(self) -> None:
        if self._candidates and self.ctx.uses_ddp:
            for call in self._candidates:
                self.report(call.node, fix=_add_map_location(call.node))


def _add_map_location(call: cst.Call) -> Replace:
    args = list(call.args)
    if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(cst.SimpleString('"cpu"'), keyword=cst.Name("map_location"),
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace(""))))
    return Replace(call, call.with_changes(args=args), 'Add `map_location="cpu"`')
