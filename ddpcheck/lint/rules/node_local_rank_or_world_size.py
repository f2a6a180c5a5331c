from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import is_local_rank
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule

_GPU_COUNTS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})


class NodeLocalRankOrWorldSize(Rule):
    """`init_process_group` gets this machine's numbers — the local rank as `rank=`, or the GPU count as `world_size=` — in a script an outside launcher starts.

    torchrun (and `torch.distributed.launch`) number the job's processes across every node: each
    process gets `RANK` (0 … world size − 1), `LOCAL_RANK` (its index on its machine) and
    `WORLD_SIZE` (all processes of the job), and the default `env://` rendezvous reads them.
    Passing `rank=local_rank` or `world_size=torch.cuda.device_count()` overrides them with
    numbers that only hold on one machine.

    Reported at the `init_process_group` call of a script started by an outside launcher (it
    reads the launcher's `RANK`/`LOCAL_RANK`/`WORLD_SIZE`, or takes its `--local_rank` flag)
    when every value its `rank=` argument may take is the local rank (`LOCAL_RANK`,
    `args.local_rank`, a parameter every caller passes it to), or every value of its
    `world_size=` is the number of GPUs of this machine (`torch.cuda.device_count()`).

    Not reported: scripts that start their own workers (`mp.spawn`: every process is on this
    machine, and its spawn index is its rank), values that fall back to the local number only
    when the launcher's is missing (`int(os.environ.get("WORLD_SIZE", torch.cuda.device_count()))`),
    the global rank (`RANK`, `dist.get_rank()`) and a rank that adds a node's offset. A
    literal `rank=`/`world_size=` is DDP015's (hard-coded rendezvous).

    ## Why it matters
    On one machine with one process per GPU the numbers agree and the job runs. On two nodes
    both machines' first processes claim rank 0 (and a world of 8 waits for 8 processes while
    16 arrive), so the rendezvous fails or hangs; with fewer processes than GPUs
    (`--nproc-per-node 2` on an 8-GPU machine) `world_size=8` waits forever for six processes
    that never start.

    ## How to fix
    Call `dist.init_process_group(backend)` without `rank=` and `world_size=`: `env://` reads
    the job's `RANK` and `WORLD_SIZE` from the launcher. Keep the local rank for the device
    (`torch.cuda.set_device(local_rank)`).

    ## References
    - https://pytorch.org/docs/stable/elastic/run.html (RANK, LOCAL_RANK, WORLD_SIZE)
    - https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization
    """

    code = "DDP037"
    name = "node-local-rank-or-world-size"
    severity = Severity.WARNING

    VALID = [
        """
        import os
        import torch
        import torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        """,
        """
        # The launcher's numbers, with this machine's only as a fallback.
        import os
        import torch
        import torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        world_size = int(os.environ.get("WORLD_SIZE", torch.cuda.device_count()))
        dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=world_size)
        """,
        """
        # Workers spawned here: every process is on this machine.
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        def worker(local_rank, world_size):
            dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500",
                                    rank=local_rank, world_size=world_size)
        if __name__ == "__main__":
            mp.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
        """,
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch
            import torch.distributed as dist
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl", rank=local_rank, world_size=torch.cuda.device_count())
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import os
            import torch.distributed as dist

            def setup(rank, world_size):
                dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world_size)

            def main():
                local_rank = int(os.environ["LOCAL_RANK"])
                setup(local_rank, int(os.environ["WORLD_SIZE"]))

            if __name__ == "__main__":
                main()
            """,
            lines=(5,),
        ),
    ]

    MESSAGE = (
        "init_process_group gets {what} in a script torchrun launches: the job's processes are "
        "counted and numbered across every node; it overrides the launcher's RANK/WORLD_SIZE and is "
        "wrong on more than one node (or with fewer processes than GPUs); drop it and let the "
        "default `env://` read what the launcher exports"
    )

    def finish(self) -> None:
        model = self.model
        root = model.root
        if model.starts_workers():
            return  # it starts its own workers: every process is on this machine
        if not model.torchrun_path:
            return
        for call in root.calls:
            if model.api(call) == api.INIT_PROCESS_GROUP:
                self._check(call)

    def _check(self, call: CallSite) -> None:
        found: list[str] = []
        world = call.arg("world_size")
        if world is not None and self._all(call, world, self._gpu_count):
            found.append("`world_size=` the number of GPUs of this machine")
        rank = call.arg("rank")
        if rank is not None and self._all(call, rank, lambda v: is_local_rank(self.model, v)):
            found.append("`rank=` the local rank")
        if found:
            self.report(call.node, self.MESSAGE.format(what=" and ".join(found)))

    def _all(self, call: CallSite, expr: cst.BaseExpression, test: Callable[[Value], bool]) -> bool:
        values = self.model.values.at_call(call, expr)
        return bool(values) and all(isinstance(v.node, cst.BaseExpression) and test(v) for v in values)

    def _gpu_count(self, value: Value) -> bool:
        node = value.node
        return isinstance(node, cst.Call) and not node.args \
            and self.model.qualname(value.module, node.func, value.scope) in _GPU_COUNTS
