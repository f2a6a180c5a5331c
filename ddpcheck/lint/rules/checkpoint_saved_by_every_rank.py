from __future__ import annotations

from typing import Literal

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint import remedies
from ddpcheck.lint.model import api
from ddpcheck.lint.model.alternatives import bound_name
from ddpcheck.lint.model.conditions import exclusive_arms
from ddpcheck.lint.model.ddp import per_rank_or_memory, wraps
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import subexpressions
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.rules._loops import Loops



class CheckpointSavedByEveryRank(Rule):
    """`torch.save` runs on every rank of a DDP job, so N processes write the same checkpoint file at once.

    ## Why it matters
    DDP keeps the replicas identical, so one copy of the weights is enough — but without a rank
    guard every process writes it, to the same path, at the same moment. Users see checkpoints
    that fail to load (`PytorchStreamReader failed reading zip archive`, `storage has wrong
    size`), truncated files on shared file systems, and N times the I/O at every save.

    Reported at the `torch.save(...)` line — in the script or in the project module that holds
    it (`utils.save_checkpoint`) — when a file that uses DDP makes it run on every rank: no
    rank-0 guard (`if rank == 0`, `if is_main_process()`, after `if rank != 0: return`,
    `if args.local_rank == -1 or dist.get_rank() == 0:`, a project helper that returns such a
    test — `def is_first_worker(): return not dist.is_available() or not dist.is_initialized()
    or dist.get_rank() == 0` — or is named for the main process (`self._on_main_rank()`), a
    flag given a rank test —
    `Trainer(..., is_master=rank == 0)` then `if self.is_master:` —, `if self.writer is not
    None:` where only rank 0 makes the writer, a rank-0 decorator such as `@rank_zero_only` or a
    project decorator whose wrapper calls the function under a rank test...) around it nor
    around any call on the way to it. A call whose arguments make the branch of the save dead
    does not reach it (`save_or_load(cfg)` on every rank and `save_or_load(cfg, model=model)`
    on rank 0, where the helper saves under `if model is not None:`). The calls that lead there are given as
    related locations (JSON `related`, SARIF `relatedLocations`). The ImageNet example's
    `if not args.multiprocessing_distributed or args.rank % ngpus_per_node == 0:` guards only
    the `mp.spawn` path: in a script torchrun can start (it reads `RANK`/`WORLD_SIZE`), it is true
    on every rank. Not reported: saves in a branch only a non-distributed run takes
    (`if not args.distributed:`) or only a part of the ranks takes (`if rank >= args.num_gpus:`;
    `if my_state[0] == 2:` on the value each rank received from `scatter_object_list`), a path that contains the rank (`f"ckpt_rank{rank}.pt"`: one
    file per rank on purpose), a path named after the batch of a loop over a DataLoader (`for
    scan_id, x in loader:` then `torch.save(out, f"{scan_id[0]}.pt")`: one file per sample, each
    rank writing its own shard's), a path named after a number read from the rank's own tensor
    in a function that makes no collective (`f"{epoch}_{psnr.item()}.tar"`: one file per rank),
    saves into memory (`io.BytesIO`), a save that fills a cache the same function otherwise
    loads into the same name (`try: vocab = torch.load(f)` / `except: vocab = build(corpus);
    torch.save(vocab, f)`, or the two arms of `if os.path.exists(f):`; not the model's state
    dict kept that way), functions nobody calls
    on every rank, and a save beside the `mp.spawn(...)` that starts the workers (after it
    returns, in the one process that launched them) in a script torchrun cannot start. TorchScript exports (`torch.jit.save(m, path)`, `torch.jit.script(model).save(path)`)
    are checkpoints too, and so is `save_pretrained(directory)` of the model DDP wraps
    (`model.module.save_pretrained(out)` for a Hugging Face or PEFT model: its weights and config
    files, all ranks writing one directory).

    ## How to fix
    Save on one rank: `if dist.get_rank() == 0: torch.save(model.module.state_dict(), path)`,
    then `dist.barrier()` on every rank before anyone reads the file. The fix puts the save
    under `if not dist.is_initialized() or dist.get_rank() == 0:`, which is also true in a
    single-process run. It is unsafe: the other ranks no longer write the file, so code that
    reads it on them right after needs a `dist.barrier()` first.

    ## References
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
    - https://github.com/NVIDIA/apex/issues/629 (two processes saving to one file: corrupt checkpoints)
    - https://github.com/bytedance/ibot/issues/15
    """

    code = "DDP010"
    fixable = True
    name = "checkpoint-saved-by-every-rank"
    severity = Severity.WARNING
    MESSAGE = (
        "`torch.save` runs on every rank: N processes write the same file at once (corrupt or "
        "truncated checkpoints); save on rank 0 only (`if dist.get_rank() == 0:`) and `dist.barrier()` "
        "before other ranks read it"
    )
    PRETRAINED_MESSAGE = (
        "`save_pretrained` of the DDP-wrapped model runs on every rank: N processes write the same "
        "weights and config files at once (corrupt or truncated checkpoints); save on rank 0 only "
        "(`if dist.get_rank() == 0:`) and `dist.barrier()` before other ranks read them"
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
        # Rank guards as people write them: a decorator, an object only rank 0 makes, a flag
        # passed in, the "not launched or rank 0" test.
        import functools
        import torch
        import torch.distributed as dist
        from torch.utils.tensorboard import SummaryWriter
        def master_only(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                if dist.get_rank() == 0:
                    return fn(*args, **kwargs)
            return wrapper
        @master_only
        def export(model, path):
            torch.save(model.state_dict(), path)
        class Trainer:
            def __init__(self, model, args, is_main):
                self.model, self.args, self.is_main = model, args, is_main
                self.writer = SummaryWriter(args.out) if is_main else None
            def fit(self):
                for epoch in range(self.args.epochs):
                    if self.writer is not None:
                        torch.save(self.model.module.state_dict(), "last.pt")
                    if self.is_main:
                        torch.save(self.args, "args.pt")
                    if self.args.local_rank == -1 or dist.get_rank() == 0:
                        torch.save(epoch, "epoch.pt")
                    export(self.model.module, "model.pt")
        def main():
            dist.init_process_group("nccl")
            Trainer(model, args, is_main=dist.get_rank() == 0).fit()
        if __name__ == "__main__":
            main()
        """,
        """
        # The helper saves only when given a model: every rank calls it without one (to load).
        import os
        import torch
        import torch.distributed as dist
        def checkpoint(path, model=None):
            if model is not None:
                torch.save(model.state_dict(), path)
            elif os.path.exists(path):
                return torch.load(path, map_location="cpu")
        def main():
            dist.init_process_group("nccl")
            state = checkpoint("last.pt")
            for epoch in range(10):
                train_one_epoch()
                if dist.get_rank() == 0:
                    checkpoint("last.pt", model.module)
        if __name__ == "__main__":
            main()
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
        Invalid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            for epoch in range(10):
                train_one_epoch()
                torch.save(model.state_dict(), "model.pt")
            """,
            lines=(6,),
            fixed="""
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            for epoch in range(10):
                train_one_epoch()
                if not dist.is_initialized() or dist.get_rank() == 0:
                    torch.save(model.state_dict(), "model.pt")
            """,
        ),
        Invalid(
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
            lines=(5,),
        ),
    ]

    _inner: set[int] | None = None  # see _wrapped
    _loops: Loops | None = None  # see _named_by_sample

    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        for site in model.paths.sites():
            target = self._file(site)
            if target is False or per_rank_or_memory(model, site, target or None):
                continue
            if target is not None and (self._named_by_sample(site, target) or self._named_by_own_value(site, target)):
                continue
            if self._fills_cache(site):
                continue
            if model.paths.ranks(site) != "every":
                continue
            if not model.torchrun_path and model.paths.launcher_only(site):
                continue  # the one process that starts the workers (`mp.spawn(...)` beside it)
            chain = model.paths.every_rank(site)
            if chain is None:
                continue
            fix = remedies.guard_on_rank_zero(model.root, site.node) if site.module is model.root else None
            message = self.PRETRAINED_MESSAGE if site.method == "save_pretrained" else None
            self.report(site.node, message, module=site.module, related=chain, fix=fix)

    def _fills_cache(self, site: CallSite) -> bool:
        """The save writes back a value the same function otherwise loads into the same name: in
        the other arm of an `if` (`if os.path.exists(f): vocab = torch.load(f)` / `else: vocab =
        build(...); torch.save(vocab, f)`) or in the `except` of a `try` that loads it (`try:
        vocab = torch.load(f)` / `except: ...; torch.save(vocab, f)`). A cache of data the run
        computes, not a checkpoint of the model."""
        obj = site.arg("obj", 0)
        if not isinstance(obj, cst.Name) or site.scope.kind != "function":
            return False
        loads = [c for c in site.module.calls_in(site.scope.qualname)
                 if self.model.api(c) == api.LOAD and c.scope is site.scope and bound_name(c) == obj.value]
        if not loads:
            return False
        if any(isinstance(b, cst.Call) and isinstance(b.func, cst.Attribute) and b.func.attr.value == "state_dict"
               for b in site.scope.assignments.get(obj.value, [])):
            return False  # the model's weights, kept for a rerun: a checkpoint all the same
        if any(exclusive_arms(c.guards, site.guards) for c in loads):
            return True
        return _saved_in_handler(site.scope.node, site.node, {id(c.node) for c in loads})

    def _named_by_sample(self, site: CallSite, target: cst.BaseExpression) -> bool:
        """The file is named after an item of a loop over a DataLoader's batches (`for scan_id,
        x in loader:` then `torch.save(noise, f"{scan_id[0]}noise.pt")`, also through a dict
        entry a project function is handed): one file per sample, and each rank holds its own
        shard of the samples — not one checkpoint all ranks write."""
        if self._loops is None:
            self._loops = Loops(self.model)
        for value in self.model.values.at_call(site, target):
            if value.at is None or not value.at.loops or not isinstance(value.node, cst.CSTNode):
                continue
            named = {n.value for n in subexpressions(value.node) if isinstance(n, cst.Name)}
            for loop in value.module.fors:
                if loop.node not in value.at.loops or loop.scope is not value.scope:
                    continue
                items = {n.value for n in subexpressions(_items(loop.node)) if isinstance(n, cst.Name)}
                if items & named and self._loops.iterates_batches(value.module, loop.node.iter, loop.scope, loop.point):
                    return True
        return False

    def _named_by_own_value(self, site: CallSite, target: cst.BaseExpression) -> bool:
        """The file is named after a number each rank reads from its own tensor (`f"{epoch}_
        {psnr.item()}.tar"`, `psnr` from the rank's last batch) in a function that exchanges
        nothing with the other ranks (no collective call, itself or in the project functions it
        calls): each rank writes its own file, not one file all of them write. A value some
        collective may have made equal on every rank is not read that way."""
        model = self.model
        for value in model.values.at_call(site, target):
            if not isinstance(value.node, cst.CSTNode):
                continue
            if not any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "item"
                       and not n.args for n in subexpressions(value.node)):
                continue
            calls = list(value.module.calls_in(value.scope.qualname))
            if any(model.api(c) in api.COLLECTIVES or model.facts.does(c, "collective") for c in calls):
                continue
            return True
        return False

    def _file(self, site: CallSite) -> cst.BaseExpression | None | Literal[False]:
        """The file a save writes to (None when not given), or False when `site` is no save:
        `torch.save(obj, f)`, `torch.jit.save(m, f)`, `scripted.save(f)` on a TorchScript module,
        `net.save_pretrained(d)` on the network DDP wraps."""
        name = self.model.api(site)
        if name in (api.SAVE, api.JIT_SAVE):
            return site.arg("f", 1)
        if site.method == "save" and name is None:
            receiver = site.receiver
            assert receiver is not None
            if any(self.model.api_of(v) in api.JIT_MAKERS for v in self.model.values.at_call(site, receiver)):
                return site.arg("f", 0)
        if site.method == "save_pretrained" and name is None and not self.model.graph.targets(site):
            receiver = site.receiver
            assert receiver is not None
            inner = self._wrapped()
            if any(id(v.node) in inner for v in self.model.values.at_call(site, receiver)):
                return site.arg("save_directory", 0)
        return False

    def _wrapped(self) -> set[int]:
        """The leaves of the modules the run wraps in DDP (`DDP(model)` with `model =
        GPT2LMHeadModel.from_pretrained(...)`): `save_pretrained` on one of them writes the
        model's weights and config, as `torch.save` would."""
        if self._inner is None:
            model = self.model
            self._inner = set()
            for module in model.paths.modules():
                for wrap in wraps(model, module):
                    if wrap.inner is not None:
                        self._inner |= {id(v.node) for v in model.values.of(
                            module, wrap.inner, wrap.site.scope, at=wrap.site.point)}
        return self._inner


def _saved_in_handler(scope: cst.CSTNode, save: cst.Call, loads: set[int]) -> bool:
    """A `try` of `scope` makes one of the `loads` (ids of calls) in its body and `save` in one
    of its `except` handlers."""
    for node in subexpressions(scope):
        if isinstance(node, cst.Try) and any(id(sub) in loads for sub in subexpressions(node.body)) \
                and any(sub is save for handler in node.handlers for sub in subexpressions(handler)):
            return True
    return False


def _items(loop: cst.For) -> cst.BaseExpression:
    """The part of a loop's target bound to the items: less `enumerate`'s counter (`for step,
    batch in enumerate(loader)`: `f"model{epoch}_{step}.bin"` is one checkpoint per step, which
    every rank writes)."""
    target, iterable = loop.target, loop.iter
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "enumerate" \
            and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        return target.elements[1].value
    return target
