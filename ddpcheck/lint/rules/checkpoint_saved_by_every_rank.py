from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.conditions import is_rank_value, on_main_rank_only, on_single_process_only
from ddpcheck.lint.context import CallSite
from ddpcheck.lint.patterns import subexpressions
from ddpcheck.lint.rule import Rule
from ddpcheck.lint.values import origins

# Functions nobody in the file calls that are still run by every rank (mp.spawn targets, main).
_ENTRY_NAME = re.compile(r"^(main|main_worker|worker|run|train|fit|.*_main|main_.*|.*_worker)$")


class CheckpointSavedByEveryRank(Rule):
    """`torch.save` runs on every rank of a DDP job, so N processes write the same checkpoint file at once.

    ## Why it matters
    DDP keeps the replicas identical, so one copy of the weights is enough — but without a rank
    guard every process writes it, to the same path, at the same moment. Users see checkpoints
    that fail to load (`PytorchStreamReader failed reading zip archive`, `storage has wrong
    size`), truncated files on shared file systems, and N times the I/O at every save.

    Reported for `torch.save(...)` in a file that uses DDP when it is not under a rank-0 guard
    (`if rank == 0`, `if is_main_process()`, after `if rank != 0: return`...), and for calls of
    the file's own functions that visibly call `torch.save` (`save_checkpoint(...)`) made on every
    rank. Saves in a branch only a non-distributed run takes (`if not args.distributed:`) are not
    reported either. A save whose path contains the rank (`f"ckpt_rank{rank}.pt"`) writes one file per rank
    on purpose and is not reported; so is a helper that no rank-unguarded code of the file calls.

    ## How to fix
    Save on one rank: `if dist.get_rank() == 0: torch.save(model.module.state_dict(), path)`,
    then `dist.barrier()` on every rank before anyone reads the file.

    ## References
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
    - https://github.com/NVIDIA/apex/issues/629 (two processes saving to one file: corrupt checkpoints)
    - https://github.com/bytedance/ibot/issues/15
    """

    code = "DDP010"
    name = "checkpoint-saved-by-every-rank"
    severity = Severity.WARNING
    MESSAGE = (
        "`torch.save` runs on every rank: N processes write the same file at once (corrupt or "
        "truncated checkpoints); save on rank 0 only (`if dist.get_rank() == 0:`) and `dist.barrier()` "
        "before other ranks read it"
    )
    HELPER_MESSAGE = (
        "`{what}()` calls `torch.save` and runs on every rank: N processes write the same file at "
        "once; call it on rank 0 only (`if dist.get_rank() == 0:`)"
    )

    VALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "model.pt")
        dist.barrier()
        """,
        """
        # A helper guarded inside (after an early return) or at its call; a per-rank path.
        import torch
        import torch.distributed as dist
        def save_checkpoint(state, path):
            if dist.get_rank() != 0:
                return
            torch.save(state, path)
        def save_on_master(*args, **kwargs):
            if is_main_process():
                torch.save(*args, **kwargs)
        def save_model(state):
            torch.save(state, "last.pt")
        def main():
            dist.init_process_group("nccl")
            save_checkpoint(state, "last.pt")
            save_on_master(state, "best.pt")
            if args.rank % ngpus_per_node == 0:
                save_model(state)
            rank = dist.get_rank()
            torch.save(optimizer.state_dict(), f"optim_rank{rank}.pt")
        if __name__ == "__main__":
            main()
        """,
        """
        # ImageNet-example style guard: not distributed, or rank 0 of the node.
        import torch
        import torch.distributed as dist
        def main_worker(gpu, ngpus_per_node, args):
            dist.init_process_group(backend="nccl")
            if not args.multiprocessing_distributed or args.rank % ngpus_per_node == 0:
                torch.save(state, "checkpoint.pth.tar")
        """,
        """
        # Not a DDP script.
        import torch
        torch.save(model.state_dict(), "model.pt")
        """,
        """
        # A trainer class: the GPU index read from LOCAL_RANK guards the save in another method.
        import os
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        class Trainer:
            def __init__(self, model):
                self.gpu_id = int(os.environ["LOCAL_RANK"])
                self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
            def _save_snapshot(self, epoch):
                torch.save({"model": self.model.module.state_dict(), "epoch": epoch}, "snapshot.pt")
            def train(self, epochs):
                for epoch in range(epochs):
                    self._run_epoch(epoch)
                    if self.gpu_id == 0 and epoch % 10 == 0:
                        self._save_snapshot(epoch)
        """,
        """
        # Single-process branch of a script with a distributed mode.
        import torch
        import torch.distributed as dist
        if args.distributed:
            dist.init_process_group("nccl")
        for epoch in range(3):
            train()
            if not args.distributed:
                torch.save(model.state_dict(), "model.pt")
            elif dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "model.pt")
        """,
    ]
    INVALID = [
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        for epoch in range(10):
            train_one_epoch()
            torch.save(model.state_dict(), "model.pt")
        """,
        """
        # A helper of the file, called by every rank from the worker.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        def save_checkpoint(state, filename="checkpoint.pth"):
            torch.save(state, filename)
        def main_worker(rank, world_size):
            model = DDP(net)
            save_checkpoint({"model": model.state_dict()})
        """,
    ]

    def finish(self) -> None:
        if not self.ctx.uses_ddp:
            return
        self._callers_cache: dict[str, list[CallSite]] = {}
        for call in self.ctx.calls:
            if call.qualname != "torch.save" or self._per_rank_path(call):
                continue
            if self._guarded(call):
                continue
            function = self._function_of(call)
            if function is None or not self._callers(function):
                if self._reaches_every_rank(call, set()):
                    self.report(call.node)
                continue
            for caller in self._callers(function):
                if self._reaches_every_rank(caller, set()):
                    self.report(caller.node, self.HELPER_MESSAGE.format(what=caller.dotted))

    def _per_rank_path(self, call: CallSite) -> bool:
        path = call.arg("f", 1)
        if path is None:
            return False
        for value in origins(self.ctx, path, call.scope):
            for sub in subexpressions(value):
                if isinstance(sub, (cst.Name, cst.Attribute, cst.Call)) and is_rank_value(sub, self.ctx.qualname):
                    return True
        return False

    def _function_of(self, call: CallSite) -> str | None:
        name = call.scope.qualname
        return name if name in self.ctx.functions else None

    def _callers(self, function: str) -> list[CallSite]:
        """Calls of a function of this file: `f(...)` for a module-level one, `self.m(...)` for a method."""
        cached = self._callers_cache.get(function)
        if cached is None:
            outer, _, short = function.rpartition(".")
            # A method is called through `self`; a module-level or nested function by its name.
            wanted = short if not outer or outer in self.ctx.functions else "self." + short
            cached = [c for c in self.ctx.calls if c.dotted == wanted]
            self._callers_cache[function] = cached
        return cached

    def _guarded(self, call: CallSite) -> bool:
        """Under a rank-0 guard, or in a branch only non-distributed runs take."""
        return bool(on_main_rank_only(call.guards, self.ctx.qualname) or on_single_process_only(call.guards, self.ctx.qualname))

    def _reaches_every_rank(self, call: CallSite, seen: set[str]) -> bool:
        """Whether `call` runs on every rank: no rank-0 guard around it, nor around any caller
        chain that leads to it."""
        if self._guarded(call):
            return False
        function = self._function_of(call)
        if function is None:
            return call.scope is self.ctx.module_scope
        if function in seen:
            return False
        callers = self._callers(function)
        if not callers:
            facts = self.ctx.facts.file_function_facts(self.ctx, function) if self.ctx.facts else frozenset()
            short = function.rsplit(".", 1)[-1]
            return bool(_ENTRY_NAME.match(short)) or "init_process_group" in facts or "ddp_wrap" in facts
        return any(self._reaches_every_rank(c, seen | {function}) for c in callers)
