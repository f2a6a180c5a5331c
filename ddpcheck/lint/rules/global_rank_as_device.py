from __future__ import annotations

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.context import DDP, CallSite, Scope
from ddpcheck.lint.names import dotted, last_name
from ddpcheck.lint.patterns import is_cuda_string
from ddpcheck.lint.rule import Rule

_GLOBAL_RANK_ENV = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}
_DEVICE_KEYWORDS = ("device", "map_location", "output_device")


class GlobalRankAsDevice(Rule):
    """The GPU index comes from the global rank instead of the local rank: wrong on every node after the first.

    ## Why it matters
    The global rank numbers processes across all machines (0…world_size-1); GPUs are numbered per
    machine (0…gpus_per_node-1). On one node the two agree, so the script works in testing. On a
    second node, rank 8 asks for GPU 8 of an 8-GPU machine: users see
    `RuntimeError: CUDA error: invalid device ordinal` on every rank of that node, or, with more
    GPUs than ranks per node, several processes silently sharing one GPU.

    Reported where a device index — `torch.cuda.set_device(x)`, `.cuda(x)`, `.to(x)`,
    `device_ids=[x]`, `output_device=x`, `device=x`, `map_location=x`, `torch.device("cuda", x)`
    or a `f"cuda:{x}"` string — is `dist.get_rank()`, the `RANK` environment variable, or a
    variable assigned from them. A parameter named `rank` (for instance in an `mp.spawn` worker,
    where the spawn index is the local GPU) is not reported, nor `rank % torch.cuda.device_count()`.

    ## How to fix
    Use the local rank: with torchrun, `local_rank = int(os.environ["LOCAL_RANK"])`, then
    `torch.cuda.set_device(local_rank)` and `DDP(model, device_ids=[local_rank])`.

    ## References
    - https://pytorch.org/docs/stable/elastic/run.html#environment-variables
    - https://github.com/meta-llama/llama-cookbook/issues/90 (set_device(rank): invalid device ordinal on the second node)
    - https://github.com/huggingface/trl/pull/515
    """

    code = "DDP007"
    name = "global-rank-as-device"
    severity = Severity.ERROR
    MESSAGE = (
        "device index `{index}` comes from the global rank ({source}): on every node after the first it "
        "names a GPU that does not exist; use the local rank, `int(os.environ[\"LOCAL_RANK\"])`"
    )

    VALID = [
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(model.cuda(local_rank), device_ids=[local_rank])
        device = torch.device(f"cuda:{local_rank}")
        """,
        """
        # mp.spawn: the spawn index is the local GPU; modulo the GPU count is fine too.
        import torch
        import torch.distributed as dist
        def worker(rank, world_size):
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            torch.cuda.set_device(rank)
            gpu = dist.get_rank() % torch.cuda.device_count()
            x = torch.zeros(3, device=gpu)
        """,
        """
        # The global rank used for what it is for: seeding and sharding.
        import torch, torch.distributed as dist
        rank = dist.get_rank()
        torch.manual_seed(rank)
        """,
    ]
    INVALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        """,
        """
        import os
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        rank = int(os.environ.get("RANK", 0))
        device = torch.device("cuda", rank)
        model = DDP(model.to(f"cuda:{rank}"), device_ids=[rank])
        """,
        """
        # Aliased and fully dotted: the same call.
        import torch
        import torch.distributed as D
        torch.cuda.set_device(D.get_rank())
        x = torch.ones(1).cuda(torch.distributed.distributed_c10d.get_rank())
        """,
        """
        import os
        import torch
        gpu = os.environ["RANK"]
        state = torch.load("ckpt.pt", map_location="cuda:%s" % gpu)
        """,
    ]

    def on_call(self, call: CallSite) -> None:
        for index in self._device_indices(call):
            for value in _index_values(index):
                source = self._global_rank(value, call.scope, 3)
                if source:
                    text = self.ctx.module.code_for_node(value)
                    self.report(index, self.MESSAGE.format(index=text, source=source))
                    break

    def _device_indices(self, call: CallSite) -> list[cst.BaseExpression]:
        found = []
        q = call.qualname
        if q == "torch.cuda.set_device":
            found.append(call.arg("device", 0))
        elif q == "torch.device":
            first = call.arg("type", 0)
            if first is not None and is_cuda_string(first):
                found += [first, call.arg("index", 1)]
        elif q == DDP:
            ids = call.arg("device_ids", 1)
            if isinstance(ids, (cst.List, cst.Tuple)):
                found += [e.value for e in ids.elements]
        elif call.method in ("cuda", "to") and call.node.args and call.node.args[0].keyword is None:
            found.append(call.node.args[0].value)
        for keyword in _DEVICE_KEYWORDS:
            found.append(call.arg(keyword))
        return [e for e in found if e is not None]

    def _global_rank(self, expr: cst.BaseExpression, scope: Scope, depth: int) -> str | None:
        """The global-rank source `expr` is (or was assigned from), as the user wrote it."""
        if isinstance(expr, cst.Call):
            q = self.ctx.qualname(expr.func)
            if q == "torch.distributed.get_rank":
                return "dist.get_rank()"
            name = last_name(expr.func)
            if name in ("int", "str") and expr.args:
                return self._global_rank(expr.args[0].value, scope, depth)
            if name in ("get", "getenv") and expr.args and _env_key(expr.args[0].value) in _GLOBAL_RANK_ENV:
                return f'os.environ["{_env_key(expr.args[0].value)}"]'
            return None
        if isinstance(expr, cst.Subscript):
            base = dotted(expr.value) or ""
            if base.endswith("environ") and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
                key = _env_key(expr.slice[0].slice.value)
                if key in _GLOBAL_RANK_ENV:
                    return f'os.environ["{key}"]'
            return None
        name = dotted(expr)
        if name is None or depth == 0:
            return None
        for value in scope.lookup(name):
            source = self._global_rank(value, scope, depth - 1)
            if source:
                return source
        return None


def _env_key(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _index_values(index: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions that give the GPU number inside a device argument: `x` in `x`,
    `f"cuda:{x}"`, `"cuda:%d" % x`, `"cuda:{}".format(x)`, `"cuda:" + str(x)`."""
    if isinstance(index, cst.FormattedString):
        if is_cuda_string(index):
            return [p.expression for p in index.parts if isinstance(p, cst.FormattedStringExpression)]
        return []
    if isinstance(index, cst.BinaryOperation) and is_cuda_string(index.left):
        if isinstance(index.operator, (cst.Modulo, cst.Add)):
            right = index.right
            if isinstance(right, cst.Tuple):
                return [e.value for e in right.elements]
            return [right]
        return []
    if isinstance(index, cst.Call) and isinstance(index.func, cst.Attribute) and index.func.attr.value == "format":
        if is_cuda_string(index.func.value):
            return [a.value for a in index.args]
        return []
    if isinstance(index, (cst.SimpleString, cst.ConcatenatedString)):
        return []
    return [index]
