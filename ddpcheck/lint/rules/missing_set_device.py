from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import uses_cuda
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.conditions import is_rank_value
from ddpcheck.lint.model.module import CallSite, EnvAccess, Guard, ModuleModel, same_test
from ddpcheck.lint.model.syntax import string_text, subexpressions
from ddpcheck.lint.rule import Invalid, Rule

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model


class MissingSetDevice(Rule):
    """A DDP script uses CUDA but never calls `torch.cuda.set_device`, so every rank starts on GPU 0.

    ## Why it matters
    A process's current CUDA device is GPU 0 until it says otherwise. Everything that uses the
    current device — `.cuda()` without an index, NCCL's communicators for `barrier()` and object
    collectives, the CUDA context itself — then lands on GPU 0 for every rank. Users see
    `nvidia-smi` list all N processes on GPU 0, out-of-memory errors on GPU 0 only, and NCCL
    warnings such as "using GPU 0 to perform barrier as devices used by this process are currently
    unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect".

    Reported once, at the `init_process_group` call, when the file (or a helper of the project it
    calls) initialises the process group, uses CUDA (the `nccl` backend, `.cuda(...)`,
    `device_ids=`, a `"cuda..."` device; itself or in the project functions its run reaches, such
    as a worker it spawns from another module), and nowhere calls `torch.cuda.set_device(...)`, enters
    `torch.cuda.device(...)`, passes `device_id=` to `init_process_group`, or pins the process
    with `CUDA_VISIBLE_DEVICES` (`torch.accelerator.set_device_index` counts too; a list of
    GPUs every process shares, `"0,1,2,3"` or the configuration's `cfg["device_ids"]`, pins none,
    nor does one GPU named by a literal at import, `"1"`, or an option read there, `args.cuda`
    (every process parses the same command line; not one named for the process, `args.gpu`,
    `args.local_rank`, nor a value from the environment), in a script that numbers its GPUs by
    rank, `.to(rank)` or `device_ids=[rank]`: written for one visible GPU per process, which the
    setting, the same in every process, does not give;
    nor does a read of the variable, such as a log line that names the GPU, or a line left
    commented out). A device held
    in a variable (`device = "cuda" if ... else "cpu"`) is CUDA. CUDA used only on the path that runs
    without a process group (`device = "cuda"` under `if args.local_rank == -1:`, beside a gloo
    group on the CPU in the `else`) is not the distributed run's. Also reported, at the same call: a device set only after CUDA
    work that runs whenever the setter does (`model.cuda(gpu)` and the DDP wrap, then a
    `learning(...)` that calls `torch.cuda.set_device`, or a trainer's constructor that sets it
    only after `super().__init__()` has wrapped a model in DDP, whose constructor broadcasts on
    the current device, the base's work under the same test, `if self.distributed:`, as the
    setter's; a move to a device named explicitly inside such a call is no such work); moving a loss module that holds no
    tensor (`nn.CrossEntropyLoss().cuda()`) or handing a device to a project object is no work. Also reported, at the same
    call, when the device is set on one branch only (`if args.gpu is not None:`) and the other
    branch uses CUDA (the two are given as related locations; a worker that gets its device from
    `mp.spawn`, and is called directly only on an arm a flag the command line cannot change rules
    out, `else:` of `if args.spawn:` declared `action="store_true", default=True`, always has
    one), and when every setter of the
    file runs on rank 0 only (or on each node's first process: `if rank == 0:` around
    `torch.cuda.set_device(...)` in a helper that lists the GPUs) and no call of the file reaches
    one in another module: the other ranks keep GPU 0. Helper modules that are only imported (no `__main__`
    guard, no work at module level) are not reported: the script that calls them may set the
    device. A module the project's packaging installs as a command (a `console_scripts` entry
    of `setup.py`/`setup.cfg`, `[project.scripts]` of `pyproject.toml`) is a script.

    ## How to fix
    Right after reading the local rank, call `torch.cuda.set_device(local_rank)` (with torchrun:
    `local_rank = int(os.environ["LOCAL_RANK"])`), or pass
    `device_id=torch.device("cuda", local_rank)` to `init_process_group` (PyTorch 2.3+).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html ("ensuring that each process exclusively works on a single GPU ... by calling torch.cuda.set_device(i)")
    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group
    - https://github.com/pytorch/examples/issues/969 (every process allocates memory on GPU 0)
    - https://github.com/NVIDIA/apex/issues/222
    """

    code = "DDP003"
    name = "missing-set-device"
    severity = Severity.WARNING
    MESSAGE = (
        "this DDP script uses CUDA but never calls `torch.cuda.set_device`: every rank starts on "
        "GPU 0; call `torch.cuda.set_device(local_rank)` before using the GPU"
    )

    VALID = [
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = DDP(model.cuda(), device_ids=[local_rank])
        """,
        """
        # device_id= binds the device at init (PyTorch 2.3+).
        import os, torch
        import torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        """,
        """
        # The device is set inside a helper of this file.
        import torch
        from torch import distributed as dist
        from torch.cuda import set_device as pin
        def setup(rank, world_size):
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            pin(rank)
        def main(rank, world_size):
            setup(rank, world_size)
            model = model.cuda(rank)
        if __name__ == "__main__":
            main(0, 1)
        """,
        """
        # CPU only: gloo and no CUDA.
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = model.to("cpu")
        """,
        """
        # A helper module: the scripts importing it may set the device themselves.
        import torch.distributed as dist
        def init_distributed():
            dist.init_process_group(backend="nccl")
        """,
        """
        # Each process sees only its own GPU.
        import os
        import torch.distributed as dist
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]
        dist.init_process_group("nccl")
        model = model.cuda()
        """,
    ]
    INVALID = [
        Invalid(
            """
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl")
            model = DDP(model.to(f"cuda:{local_rank}"), device_ids=[local_rank])
            """,
            lines=(7,),
        ),
        Invalid(
            """
            import torch
            def main():
                torch.distributed.init_process_group(backend="gloo")
                model = torch.nn.parallel.DistributedDataParallel(net.cuda())
            if __name__ == "__main__":
                main()
            """,
            lines=(3,),
        ),
    ]

    BRANCH_MESSAGE = (
        "`{set_device}` runs only when `{test}`; the other branch uses CUDA without it, so every "
        "rank starts on GPU 0 there; set the device on every path (`torch.cuda.set_device(local_rank)`)"
    )

    SOME_RANKS_MESSAGE = (
        "`torch.cuda.set_device` runs only on some ranks (under `{test}`): every other rank's current "
        "device stays GPU 0, where CUDA's defaults land (`.cuda()`, contexts, NCCL communicators); "
        "call `torch.cuda.set_device(local_rank)` on every rank before any CUDA work"
    )

    LATE_MESSAGE = (
        "`torch.cuda.set_device` runs only after CUDA work (`{work}`): until it runs every rank's "
        "current device is GPU 0, where CUDA's defaults land (`.cuda()`, contexts, NCCL communicators); "
        "call `torch.cuda.set_device(local_rank)` before any CUDA work"
    )

    def finish(self) -> None:
        model = self.model
        sites = model.init_sites()
        if not sites or not (model.is_entry_point() or model.console_script()):
            return
        if any(c.qualname == api.INIT_PROCESS_GROUP and c.has_keyword("device_id") for c in sites):
            return
        root = model.root
        visible = [a for a in root.env if a.written and a.key == "CUDA_VISIBLE_DEVICES"]
        # A list of several GPUs (`",".join(gpus)`, `"0,1,2,3"`) set for the processes to share
        # pins none of them: each still starts on the first.
        # So does a setting every process makes alike (`"1"` or `args.cuda` at import) in a script
        # that numbers its GPUs by rank (`.to(rank)`, `device_ids=[rank]`): written for several
        # visible GPUs, one per process, which a setting shared by all processes does not give.
        ranked: list[bool] = []

        def by_rank() -> bool:
            if not ranked:
                ranked.append(any(self._device_by_rank(c) for c in model.paths.sites()))
            return ranked[0]
        shared = [a for a in visible if _several_devices(a.node, root)
                  or _same_in_every_process(a, root) and by_rank()]
        if len(shared) < len(visible):
            return
        # Other mentions may set it another way (`env={"CUDA_VISIBLE_DEVICES": ...}`); a comment,
        # or a read of it (a log line naming the GPU), sets nothing.
        code = code_only(root.source)
        mentions = code.count("'CUDA_VISIBLE_DEVICES'") + code.count('"CUDA_VISIBLE_DEVICES"')
        reads = sum(1 for a in root.env if not a.written and a.key == "CUDA_VISIBLE_DEVICES")
        reads += sum(1 for c in root.calls if model.api(c) in api.ENV_GETTERS and model.api(c) != "os.environ.setdefault"
                     and string_text(c.arg("key", 0)) == "CUDA_VISIBLE_DEVICES")
        if mentions - reads > len(shared):
            return
        if not any(uses_cuda(model, c) for c in root.calls) \
                and not any(uses_cuda(model, c) for c in model.paths.sites() if c.module is not root):
            return  # (CUDA work in the project functions the run reaches counts too: a spawned worker's)
        direct = [c for c in root.calls if model.api(c) in api.SET_DEVICE | api.DEVICE_CONTEXTS]
        if direct and self._setters_on_some_ranks(direct):
            return
        if direct:
            # Every CUDA use of the file is listed only when a setter sits in a branch.
            if not self._on_one_branch(direct, lambda: [c for c in root.calls if uses_cuda(model, c)]):
                self._set_too_late(direct)
            return
        # Last, as it follows the project's functions: one of them sets the device.
        setters = [c for c in root.calls if (c.qualname is None or c.target is not None)
                   and "set_device" in model.facts.of_call(c)]
        if setters:
            self._set_too_late(setters)
            return
        init = sites[0]
        self.report(init.node, module=init.module, related=model.paths.chain(init))

    def _setters_on_some_ranks(self, direct: list[CallSite]) -> bool:
        """Every setter of the file runs on a part of the ranks only (`if rank == 0:` around
        `torch.cuda.set_device(...)` in a helper that prints the GPUs), and no call of the file
        reaches a setter elsewhere: the other ranks never set their device. True when reported."""
        model = self.model
        partial = [c for c in direct if model.paths.restricted(c) in _SOME_RANKS]
        if len(partial) < len(direct):
            return False
        held = {id(c.node) for c in partial}
        # The file's calls that reach a setter (a helper, the worker `mp.spawn` runs) reach only
        # these: every function on the way is the file's own, and sets the device nowhere else.
        seen: set[str] = set()
        for call in model.root.calls:
            if id(call.node) in held or "set_device" not in model.facts.of_call(call):
                continue
            if model.api(call) in api.SET_DEVICE | api.DEVICE_CONTEXTS:
                return False
            for function, _ in model.graph.targets(call):
                if function.module is not model.root:
                    return False  # a setter in another module: not read here
                seen.add(function.qualname)
        if not seen <= set(model.root.functions):
            return False
        first = partial[0]
        guard = model.paths.main_only(first) or model.paths.rank_guard(first, False) or model.paths.some_only(first)
        test = " ".join(first.module.code(guard.test).split()) if guard is not None else "a rank test"
        if guard is not None and guard.negated:
            test = f"not ({test})"
        inits = model.init_sites()
        where = inits[0] if inits else partial[0]
        self.report(where.node, self.SOME_RANKS_MESSAGE.format(test=test), module=where.module,
                    related=[*model.paths.chain(where), first])
        return True

    def _device_by_rank(self, site: CallSite) -> bool:
        """A move to, or a DDP wrap on, a GPU numbered by a rank (`.to(rank)`, `.cuda(gpu)`,
        `device_ids=[local_rank]`)."""
        model = self.model
        indices: list[cst.BaseExpression] = []
        if model.api(site) == api.DDP:
            ids = site.arg("device_ids", 1)
            if isinstance(ids, (cst.List, cst.Tuple)):
                indices += [e.value for e in ids.elements]
        elif site.method in ("cuda", "to") and site.qualname is None and site.node.args \
                and site.node.args[0].keyword is None:
            indices.append(site.node.args[0].value)
        resolve = model.resolver_for(site.module, site.scope)
        return any(is_rank_value(i, resolve) for i in indices)

    def _on_one_branch(self, setters: list[CallSite], cuda_uses: Callable[[], list[CallSite]]) -> bool:
        """`if args.gpu is not None: torch.cuda.set_device(args.gpu) ... else: model.cuda()`: the
        device is set on one path only, and the other path uses CUDA. True when reported."""
        for setter in setters:
            guard = self._branch(setter)
            if guard is None:
                return False  # set on every path of its function
        inits = self.model.init_sites()
        cuda = cuda_uses()
        for setter in setters:
            guard = self._branch(setter)
            assert guard is not None
            if any(any(g.node is guard.node and g.negated == guard.negated for g in i.guards) for i in inits):
                continue  # the process group exists only on this branch: the other is single-process
            for use in cuda:
                if use.scope is setter.scope and any(
                    g.node is guard.node and g.negated != guard.negated for g in use.guards
                ) and not any(self._covers(other, use) for other in setters if other is not setter):
                    test = " ".join(self.model.root.code(guard.test).split())
                    if guard.negated:
                        test = f"not ({test})"
                    # Reported with the whole-run findings, at the init call; the one-branch
                    # `set_device` and the CUDA use that misses it are the related locations.
                    where = inits[0] if inits else setter
                    self.report(where.node,
                                self.BRANCH_MESSAGE.format(set_device=setter.dotted or "set_device", test=test),
                                module=where.module, related=[*self.model.paths.chain(where), setter, use])
                    return True
        return False

    @staticmethod
    def _covers(setter: CallSite, use: CallSite) -> bool:
        """`setter` runs whenever `use` does: the other branch sets the device itself (`if gpus
        == 1: device = torch.device("cuda:0"); torch.cuda.set_device(0) ... else: ...`). Whether
        it does so in time is the late-setter check's question, not this one's."""
        held = {(id(g.node), g.negated) for g in use.guards}
        return setter.scope is use.scope \
            and all((id(g.node), g.negated) in held for g in setter.guards)

    def _set_too_late(self, setters: list[CallSite]) -> None:
        """Every call that sets the device (itself, or a project function that does) comes after
        CUDA work of its own function that runs whenever it does (`model.cuda(gpu)`, the DDP
        wrap, then `learning(...)` calling `torch.cuda.set_device`): that work, and the CUDA
        context it creates, has already landed on GPU 0."""
        model = self.model
        first: CallSite | None = None
        setters = [s for s in setters if not self._without_group(s, 2)]
        if not setters:
            return
        for setter in setters:
            work = self._work_before(setter, 2)
            if work is None and model.api(setter) not in api.SET_DEVICE | api.DEVICE_CONTEXTS:
                work = self._work_inside(setter, 2)
            if work is None:
                return  # this one sets the device in time
            first = work if first is None or work.module is first.module and work.tick < first.tick else first
        assert first is not None
        inits = model.init_sites()
        where = inits[0] if inits else setters[0]
        shown = " ".join(first.module.code(first.node).split())
        if len(shown) > 60:
            shown = shown[:57] + "..."
        self.report(where.node, self.LATE_MESSAGE.format(work=shown), module=where.module,
                    related=[*model.paths.chain(where), first, setters[0]])

    def _work_inside(self, call: CallSite, depth: int) -> CallSite | None:
        """`call` runs a project function that sets the device only after CUDA work of its own
        (`SimSiamTraining(...)`, whose constructor first runs `super().__init__()`, which moves a
        model to `self.local_rank` and wraps it, then calls `torch.cuda.set_device`): that work,
        the setter followed `depth` calls down (and the work two calls below each). None when every function it may run sets the device first."""
        model = self.model
        found: CallSite | None = None
        for callee, _ in model.graph.targets(call):
            calls = [c for c in callee.module.calls_in(callee.qualname) if c.scope.qualname == callee.qualname]
            setters = [c for c in calls if model.api(c) in api.SET_DEVICE | api.DEVICE_CONTEXTS
                       or c.target is not None and "set_device" in model.facts.of_call(c)]
            if not setters:
                continue
            setter = min(setters, key=lambda c: c.tick)
            held = setter.guards
            work = next((c for c in calls if c.tick < setter.tick and _within(c.guards, held)
                         and (_current_device_work(model, c) or self._work_below(c, held, 2))), None)
            if work is None and depth > 0 and model.api(setter) not in api.SET_DEVICE | api.DEVICE_CONTEXTS:
                work = self._work_inside(setter, depth - 1)
            if work is None:
                return None  # this function sets the device in time
            found = found or work
        return found

    def _work_below(self, call: CallSite, held: tuple[Guard, ...], depth: int) -> bool:
        """A project function `call` runs does CUDA work whenever the guards `held` hold
        (under no test of its own, or under the same tests: `if self.distributed:` in a method
        called from a constructor that sets the device under `if self.distributed:`), `depth`
        calls down."""
        model = self.model
        for callee, _ in model.graph.targets(call):
            for c in callee.module.calls_in(callee.qualname):
                if c.scope.qualname != callee.qualname or not _within(c.guards, held):
                    continue
                if _current_device_work(model, c) or depth > 0 and self._work_below(c, held, depth - 1):
                    return True
        return False

    def _without_group(self, site: CallSite, depth: int) -> bool:
        """`site` runs only where no process group is set up: on the single-process path itself,
        or in a function every call of which is (`main_single_gpu(...)` under `if device_count
        <= 1:`), `depth` callers up."""
        model = self.model
        if model.paths.restricted(site) == "single":
            return True
        function = model.paths.function_of(site)
        if depth <= 0 or function is None:
            return False
        callers = [c for c, _ in model.graph.callers(function)]
        return bool(callers) and all(self._without_group(c, depth - 1) for c in callers)

    def _work_before(self, site: CallSite, depth: int) -> CallSite | None:
        """CUDA work of the file that runs before `site` whenever `site` runs: earlier in its
        function under the same conditions, or, when there is none, before every call of that
        function (`depth` callers up). None when some way to `site` does none first."""
        model = self.model
        held = {(id(g.node), g.negated) for g in site.guards}
        earlier = [c for c in model.root.calls if c.scope is site.scope and c.tick < site.tick
                   and {(id(g.node), g.negated) for g in c.guards} <= held and _cuda_work(model, c)
                   and not any(n is site.node for n in subexpressions(c.node))]  # (`DDP(set_model(gpu))`)
        if earlier:
            return earlier[0]
        function = model.paths.function_of(site)
        if depth <= 0 or function is None:
            return None
        # (A caller on the single-process path sets up no group: its order does not matter.)
        callers = [c for c, _ in model.graph.callers(function) if not self._without_group(c, 2)]
        if not callers or any(c.module is not model.root for c in callers):
            return None
        found = [self._work_before(c, depth - 1) for c in callers]
        if any(w is None for w in found):
            return None
        return found[0]

    def _about_none(self, site: CallSite, guard: Guard) -> bool:
        """`x is not None` / `x is None` where `x` is known never to be None."""
        test = guard.test
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return False
        comp = test.comparisons[0]
        if not isinstance(comp.operator, (cst.Is, cst.IsNot)) or not (
                isinstance(comp.comparator, cst.Name) and comp.comparator.value == "None"):
            return False
        return self.model.values.never_none(site, test.left)

    def _branch(self, site: CallSite) -> Guard | None:
        """The innermost guard of `site` that is about neither ranks nor CUDA availability nor the
        launch mode: a condition under which the device is set on some runs only."""
        for guard in reversed(site.guards):
            if self.model.paths.kind(site.module, guard, site.scope) is not None:
                continue
            text = self.model.root.code(guard.test)
            if "is_available" in text or "cuda" in text.lower() or "device_count" in text:
                continue
            if self._about_none(site, guard):
                continue  # `if args.gpu is not None:` where it is never None: every run takes it
            return guard
        return None


def _within(guards: tuple[Guard, ...], held: tuple[Guard, ...]) -> bool:
    """Every one of `guards` is one of `held`, or asks the same as one of them (an equal test
    built only from names and literals, on the same arm): code under `guards` runs whenever
    code under `held` does."""
    return all(any(same_test(g, h) for h in held) for g in guards)


def _same_in_every_process(access: EnvAccess, module: ModuleModel) -> bool:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = "1"` at module level under no condition: a literal
    naming one GPU, the same in every process (each spawned worker imports the module again);
    so is an option read there (`= args.cuda`), which every process parses from the same
    command line — unless its name says it is the process's own (`args.local_rank`, `args.gpu`)
    or it comes from the environment, which a launcher may set per process."""
    if access.guards or access.scope.kind != "module":
        return False
    for node in module.tree.body:
        for line in node.body if isinstance(node, cst.SimpleStatementLine) else ():
            if isinstance(line, cst.Assign) and any(t.target is access.node for t in line.targets):
                value = line.value
                if isinstance(value, cst.SimpleString):
                    text = string_text(value)
                    return text is not None and text.strip().isdigit()
                code = module.code(value)
                return isinstance(value, (cst.Attribute, cst.Subscript)) \
                    and not _PER_PROCESS.search(code) and not _ENVIRONMENT.search(code)
    return False


def _several_devices(target: cst.Subscript, module: ModuleModel) -> bool:
    """The value assigned to `os.environ["CUDA_VISIBLE_DEVICES"]` lists several GPUs: a join
    of a list, or a literal with a comma."""
    for node in subexpressions(module.tree):
        if isinstance(node, cst.Assign) and any(t.target is target for t in node.targets):
            value = node.value
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value == "join":
                return True
            text = string_text(value)
            if text is not None:
                return "," in text
            # A list the configuration names for all processes (`cfg["meta"]["device_ids"]`,
            # `args.gpus`): the same value in every process, so it pins none of them.
            code = module.code(value)
            return bool(_DEVICE_LIST.search(code)) and not _PER_PROCESS.search(code) \
                and not _ENVIRONMENT.search(code)  # what the environment holds is not known here
    return False


_ENVIRONMENT = re.compile(r"environ|getenv")
# What `Paths.restricted` says of code that rank 0 (or each node's first process) alone runs: the
# others keep GPU 0, which is not theirs. (Code that only rank 0 skips leaves rank 0 on GPU 0, its own
# on the first node.)
_SOME_RANKS = frozenset({"main", "node"})
_DEVICE_LIST = re.compile(r"(?:device_ids|devices|gpus|gpu_ids|visible_devices)\b", re.I)
_PER_PROCESS = re.compile(r"rank|local|\bgpu\b|\bdevice_id\b|\bidx\b|\bindex\b|\bi\b|\[\s*\w+\s*\]\s*\)?$", re.I)


def _cuda_work(model: Model, site: CallSite) -> bool:
    """A call that does work on the GPU: a move there (`.cuda()`, `.to("cuda:1")`), the DDP wrap
    of a model there, or torch making a tensor there (`torch.zeros(2, device="cuda")`). Not a
    collective (for one before any device is used, NCCL takes `rank % device_count`, the right
    GPU on one machine), not the
    process group's set-up, a `torch.device` object, nor a project object handed a device."""
    name = model.api(site) or ""
    if name in (api.INIT_PROCESS_GROUP, api.TORCH_DEVICE):
        return False
    if site.method not in ("cuda", "to") and name != api.DDP and not name.startswith("torch."):
        return False
    if site.method in ("cuda", "to") and site.receiver is not None and _tensorless_loss(model, site):
        return False  # (`nn.CrossEntropyLoss().cuda()` moves nothing: the module holds no tensor)
    return uses_cuda(model, site)


def _current_device_work(model: Model, site: CallSite) -> bool:
    """Work that lands on the current device whatever it names: the DDP wrap of a model on CUDA
    (its constructor broadcasts over NCCL, on the current device), or `.cuda()` with no index.
    A move to a device named explicitly (`.to(device)`) inside a project function is not."""
    if model.api(site) == api.DDP:
        return uses_cuda(model, site)
    return site.method == "cuda" and site.qualname is None and not site.node.args


def _tensorless_loss(model: Model, site: CallSite) -> bool:
    """The receiver is a torch loss module made without a weight tensor."""
    assert site.receiver is not None
    made = model.made_by(site, site.receiver)
    return made is not None and all(
        (name or "").startswith("torch.nn.") and (name or "").endswith("Loss")
        and not any(a.keyword is not None and "weight" in a.keyword.value for a in call.args)
        and not any(a.keyword is None for a in call.args)
        for call, name in made)
