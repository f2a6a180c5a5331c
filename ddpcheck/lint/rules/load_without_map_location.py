from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import per_rank_or_memory
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.rule import Invalid, Replace, Rule

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
            lines=(4,),
            fixed="""
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            state = torch.load(args.resume, map_location="cpu")
            """,
        ),
        Invalid(
            """
            # One argument per line: the fix follows the layout.
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            state = torch.load(
                args.resume,
            )
            """,
            lines=(5,),
            fixed="""
            # One argument per line: the fix follows the layout.
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            state = torch.load(
                args.resume,
                map_location="cpu",
            )
            """,
        ),
        Invalid(
            """
            from torch import load
            from torch.utils.data.distributed import DistributedSampler
            def resume(path):
                return load(path, weights_only=True)
            """,
            lines=(4,),
            fixed="""
            from torch import load
            from torch.utils.data.distributed import DistributedSampler
            def resume(path):
                return load(path, weights_only=True, map_location="cpu")
            """,
        ),
    ]

    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        for site in model.paths.sites():
            if model.api(site) != api.LOAD or site.has_star_kwargs or site.arg("map_location", 1) is not None:
                continue
            if model.paths.main_only(site) or model.paths.single_only(site):
                continue
            if self._cached_data(site) or per_rank_or_memory(model, site, site.arg("f", 0), memory=False):
                continue  # cached data, or a file this rank saved from its own GPU
            fix = _add_map_location(site.node) if site.module is model.root else None
            self.report(site.node, fix=fix, module=site.module, related=model.paths.chain(site))

    def _cached_data(self, site: CallSite) -> bool:
        path = site.arg("f", 0)
        if path is None:
            return False
        if _DATA_WORDS.search(site.module.code(path)):
            return True
        for value in self.model.values.at_call(site, path):
            node = value.node
            if isinstance(node, cst.CSTNode) and _DATA_WORDS.search(value.module.code(node)):
                return True
        return False


def _add_map_location(call: cst.Call) -> Replace:
    args = list(call.args)
    new = cst.Arg(cst.SimpleString('"cpu"'), keyword=cst.Name("map_location"),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    if args and isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        # One argument per line: the new one goes on its own line, indented like the first,
        # and takes over the last one's trailing comma and the space before `)`.
        last = args[-1]
        new = new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=call.whitespace_before_args),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
    elif args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new)
    return Replace(call, call.with_changes(args=args), 'Add `map_location="cpu"`')
