from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, ModuleModel, Scope
from ddpcheck.lint.model.syntax import string_text
from ddpcheck.lint.positions import node_ranges
from ddpcheck.lint.rule import Invalid, Rule

_VARIABLE = "CUDA_VISIBLE_DEVICES"
# Calls that initialise the CUDA driver (cuInit), after which CUDA_VISIBLE_DEVICES is not read again.
_INITIALISING = frozenset({
    "torch.cuda.is_available", "torch.cuda.init", "torch.cuda.set_device", "torch.cuda.current_device",
    "torch.cuda.get_device_name", "torch.cuda.get_device_properties", "torch.cuda.get_device_capability",
    "torch.cuda.synchronize", "torch.cuda.mem_get_info", "torch.cuda.empty_cache",
})


class CudaVisibleDevicesAfterCudaInit(Rule):
    """`CUDA_VISIBLE_DEVICES` is set inside the script after a call that initialised CUDA: the process keeps the GPUs it saw before.

    The CUDA driver reads `CUDA_VISIBLE_DEVICES` once, when it initialises. In torch 2.13
    `torch.cuda.is_available()` initialises it (it calls `cudaGetDeviceCount`, unless
    `PYTORCH_NVML_BASED_CUDA_CHECK=1`), as do `set_device`, `current_device`, `.cuda()`,
    `get_device_name` and the like. A later `os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)`
    changes the environment of child processes but not the devices this process already sees.

    ## Why it matters
    Every rank then uses `cuda:0` of the original list — the same GPU — while the code believes
    each rank has its own: all ranks share one device (out-of-memory or a crawl), or NCCL refuses
    ("Duplicate GPU detected"). Worse, `torch.cuda.device_count()` reads the variable again
    through NVML before torch's own lazy initialisation, so it may report 1 GPU while the process
    actually drives another.

    Reported at the assignment (or `os.environ.update` / `setdefault` / `os.putenv`) when an
    initialising call comes before it in the same function, or runs at import time (module level,
    outside `if __name__ == "__main__":`) of the same file, or runs in the constructor of the
    class whose other method makes the assignment (`self.device = torch.device("cuda" if
    torch.cuda.is_available() else "cpu")` in `__init__`, the variable set in `init_ddp`: the
    instance is built before its methods run) — in the linted file and in the project functions
    it runs. A process started afterwards (`mp.spawn`, `subprocess`, also `mp.spawn(self.worker)`
    for the method that sets the variable) is not affected and is not reported.

    ## How to fix
    Set `CUDA_VISIBLE_DEVICES` before anything touches CUDA — first thing in the worker, or
    better in the launch command (`CUDA_VISIBLE_DEVICES=0,1 torchrun ...`) — or, with torchrun,
    leave the variable alone and call `torch.cuda.set_device(local_rank)`.

    ## References
    - https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars
    - https://pytorch.org/docs/stable/notes/cuda.html (device management; the NVML-based device count)
    """

    code = "DDP032"
    name = "cuda-visible-devices-after-cuda-init"
    severity = Severity.ERROR
    MESSAGE = (
        "`CUDA_VISIBLE_DEVICES` is set after `{call}` (line {line}) initialised CUDA: this process "
        "keeps the GPUs it saw then; set it before any CUDA call, or in the launch command"
    )

    VALID = [
        """
        import os
        import torch

        def worker(local_rank, args):
            os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
            torch.cuda.set_device(0)
            model = Net().cuda()

        if __name__ == "__main__":
            assert torch.cuda.is_available()
            torch.multiprocessing.spawn(worker, args=(args,), nprocs=torch.cuda.device_count())
        """,
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch
            import torch.distributed as dist

            def main():
                device = "cuda" if torch.cuda.is_available() else "cpu"
                local_rank = int(os.environ["LOCAL_RANK"])
                os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
                dist.init_process_group("nccl")
                model = Net().to(device)
            """,
            lines=(8,),
        ),
        Invalid(
            """
            # The module-level check runs at import, before main() narrows the devices.
            import os
            import torch

            DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def main(args):
                os.environ.update({"CUDA_VISIBLE_DEVICES": args.gpus})
                train(args)

            if __name__ == "__main__":
                main(parse_args())
            """,
            lines=(8,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        reached = {(id(f.module), f.qualname) for f in model.paths.reached()}
        for module in model.paths.modules():
            if module is model.root:
                self._check(module, None)
            else:
                self._check(module, reached)

    def _check(self, root: ModuleModel, reached: set[tuple[int, str]] | None) -> None:
        """The writes of `root` after an initialising call; for a project module the linted file
        reaches (`reached`: the functions it runs), the writes in those functions only."""
        if _VARIABLE not in root.source:
            return
        writes = self._writes(root)
        if reached is not None:
            writes = [(n, s) for n, s in writes if s.function is not None and (id(root), s.function.qualname) in reached]
        if not writes:
            return
        inits = [c for c in root.calls if self._initialises(c)]
        if not inits:
            return
        ranges = node_ranges(root.tree, [n for n, _ in writes] + [c.node for c in inits])
        for node, scope in writes:
            where = ranges.get(node)
            if where is None:
                continue
            function = scope.function
            for call in inits:
                at = ranges.get(call.node)
                if at is None:
                    continue
                same = call.scope.function is function and at[0] < where[0]
                at_import = call.scope is root.module_scope and not self._under_main_guard(root, call) \
                    and function is not None
                if same or at_import or _constructed_before(root, call.scope, scope):
                    self.report(node, self.MESSAGE.format(call=root.code(call.node.func).strip() + "()", line=at[0]),
                                module=root)
                    break

    def _writes(self, root: ModuleModel) -> list[tuple[cst.CSTNode, Scope]]:
        out: list[tuple[cst.CSTNode, Scope]] = [(a.node, a.scope) for a in root.env if a.written and a.key == _VARIABLE]
        for call in root.calls:
            name = self.model.api(call) or ""
            if name in ("os.environ.setdefault", "os.putenv"):
                if string_text(call.arg("key", 0)) == _VARIABLE:
                    out.append((call.node, call.scope))
            elif name == "os.environ.update" and call.node.args:
                value = call.node.args[0].value
                if isinstance(value, cst.Dict) and any(
                        isinstance(e, cst.DictElement) and string_text(e.key) == _VARIABLE for e in value.elements):
                    out.append((call.node, call.scope))
                elif any(a.keyword is not None and a.keyword.value == _VARIABLE for a in call.node.args):
                    out.append((call.node, call.scope))
        return out

    def _initialises(self, call: CallSite) -> bool:
        name = self.model.api(call)
        if name in _INITIALISING:
            return True
        return call.method == "cuda" and name is None

    @staticmethod
    def _under_main_guard(root: ModuleModel, call: CallSite) -> bool:
        return any(g.node in root.main_guards for g in call.guards)


def _constructed_before(module: ModuleModel, init: Scope, write: Scope) -> bool:
    """`init` is the constructor of the class whose other method `write` is in: the constructor
    has run on the instance before any of its methods can (`self.model = Net().cuda()` in
    `__init__`, `os.environ["CUDA_VISIBLE_DEVICES"] = ...` in `init_ddp`). Not for a method
    handed over as a callable (`mp.spawn(self.worker, ...)`): it may run in a new process."""
    constructor, method = init.function, write.function
    if constructor is None or method is None or constructor.name != "__init__" or method.name == "__init__":
        return False
    owner = constructor.parent
    if owner is None or owner.kind != "class" or method.parent is not owner:
        return False
    return not re.search(rf"\.{re.escape(method.name)}\b(?!\s*\()", code_only(module.source))
