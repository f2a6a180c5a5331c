from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import global_rank_origin
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.model.syntax import dotted, int_value, string_text
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Rule

_DEVICE_KEYWORDS = ("device", "device_id", "map_location", "output_device")
_DEVICE_COUNT = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})
# How scripts name the GPUs (or processes) of one machine.
_MACHINE_COUNT = re.compile(
    r"^(n_?gpus?|num_gpus?|gpus|(n_?)?(gpus?|procs?|processes|devices)_per_(node|machine|host)"
    r"|nproc_per_node|local_world_size|local_size)$", re.I)


# A name that says it holds a device (`gpu_id`, `device`, `cuda_idx`), not a rank.
_DEVICE_NAME = re.compile(r"gpu|device|cuda|^dev", re.I)

class GlobalRankAsDevice(Rule):
    """The GPU index comes from the global rank instead of the local rank: wrong on every node after the first.

    ## Why it matters
    The global rank numbers processes across all machines (0…world_size-1); GPUs are numbered per
    machine (0…gpus_per_node-1). On one node the two agree, so the script works in testing. On a
    second node, rank 8 asks for GPU 8 of an 8-GPU machine: users see
    `RuntimeError: CUDA error: invalid device ordinal` on every rank of that node, or, with more
    GPUs than ranks per node, several processes silently sharing one GPU.

    Reported where a device index — `torch.cuda.set_device(x)`, `.cuda(x)`, `.to(x)`,
    `device_ids=[x]` (also a list held in a local name, `device_ids = [rank] if
    torch.cuda.is_available() else None`, or kept on an object, `args.device_ids = device_ids`), `output_device=x`, `device=x`, `device_id=x` (a DALI pipeline's), `map_location=x`, `torch.device("cuda", x)`
    or a `f"cuda:{x}"` string (also one built in a variable first, `dev = f"cuda:{rank}"`, then
    `torch.device(dev)`: reported where the string is built) — is `dist.get_rank()`, the `RANK` environment variable, an MPI
    job's `MPI.COMM_WORLD.Get_rank()`, or a variable assigned from them, or a list of GPUs (its
    name says so) looked up by them (`config.gpu_ids[rank]`) — also an attribute a
    set-up helper fills on the object it is given (`init_distributed_mode(args)` setting
    `args.rank = int(os.environ["RANK"])`, then `torch.cuda.set_device(args.rank)`), a field of
    a `@dataclass` made from it (`JobInfo(rank=...)`, or filled by a subclass's
    `super().__init__(rank=...)`), a helper handed the variable's name
    (`read_environment("SLURM_PROCID")` returning `os.environ.get(variable)`), or that the
    caller sets before handing the object on (`args.local_rank = dist.get_rank()`, then
    `train(args)`), and the targets of a `map_location` table (`{"cuda:0": f"cuda:{rank}"}`). Also
    reported: the global rank modulo a fixed GPU count (`rank % 8`, `rank % GPUS_PER_NODE` with
    `GPUS_PER_NODE = 8`), which is right only on nodes with exactly that many GPUs, and the first
    GPU of a block numbered by the global rank (`list(range(rank * n, (rank + 1) * n))[0]` with
    `n` GPUs per process of one machine); with `n = torch.cuda.device_count() //
    dist.get_world_size()` the block stays within the machine and is not reported. Also the rank
    a multi-machine `mp.spawn` script composes for itself, `args.rank * ngpus_per_node + gpu`
    (a machine number times the GPUs of one machine — `torch.cuda.device_count()`, a literal, a
    name such as `ngpus_per_node` or `args.gpus` — plus the index within it, also one read in
    place, `int(os.environ["LOCAL_RANK"])`), the global rank moved by a constant (`gpu_index =
    rank - 1` where rank 0 does no GPU work: it still grows with the node), and a bare number
    in `torch.device(x)` (an index of the accelerator's devices). A parameter named `rank` (for
    instance in an `mp.spawn` worker, where the spawn index is the local GPU) is not reported,
    nor `rank % torch.cuda.device_count()`. Nor a script that cannot span machines: started only
    by `mp.spawn` (it reads no launcher variable) and meeting on a loopback address
    (`MASTER_ADDR = "localhost"`), where the global rank is the local GPU; or started by a
    launcher and overwriting that address with a loopback one on every path, itself or in the
    project function it calls to set up the process group (`setup(world_size)` in utils.py).
    Nor the `RANK` variable read only where `LOCAL_RANK` is absent (`if "LOCAL_RANK" in
    os.environ: rank = int(os.environ["LOCAL_RANK"])` / `elif "RANK" in os.environ: rank =
    int(os.environ["RANK"])`; likewise `SLURM_PROCID` without `SLURM_LOCALID`, Open MPI's ranks):
    a launcher that sets the global rank for a job on several machines sets that local rank
    beside it, so the fallback runs on one machine only. Another launcher's rank read there
    (`SLURM_PROCID` where `LOCAL_RANK` is absent) is still reported.

    One finding per value of the rank, however many places use it as the device: it sits at the
    first device use (in the function that reads the rank) — or where the rank is read into a
    name that says it holds a device (`gpu_id = dist.get_rank()`): there the rank becomes the
    device; or, where that name is a parameter of a project function (`def __init__(self, root,
    batch, device_id=0)` passing it on as `device_id=`), at the argument each caller hands it
    (`DaliImageNet(root, 256, self.rank)`) —, and the message counts the others.
    The fix is one — the local rank for that variable — and twenty `.cuda(rank)` calls would
    otherwise bury the report. A rank read through a project helper that hands it back
    (`def distributed_rank(): return dist.get_rank()`, also used to seed and to pick the main
    process) is read anew at each call of it: each call used as a device is its own finding
    (the fix goes there), unless the helper's name says it hands back a device
    (`get_device()`: fixed once, in the helper). `torch.device(kind, x)` with a device type
    chosen at run time (`config["DEVICE"]`) is read as a CUDA index: an index only means
    something for an accelerator. A rank read in a module's top-level code (`RANK =
    int(os.environ["RANK"])`) and imported by another module that makes it a device too is
    reported in each module: each module's uses are their own fix. A device use in a function
    of the script that no run reaches (a second set-up left beside the one the `__main__` block
    calls, which nothing calls or names) is not reported.

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
    MODULO_MESSAGE = (
        "device index `{index}` is the global rank modulo a fixed GPU count ({source}): on nodes with "
        "another number of GPUs it names a wrong or missing GPU; use the local rank, "
        "`int(os.environ[\"LOCAL_RANK\"])`, or `rank % torch.cuda.device_count()`"
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
        Invalid(
            """
            # An MPI job's rank folded by a fixed GPU count.
            import torch
            from mpi4py import MPI
            GPUS_PER_NODE = 8
            def dev():
                return torch.device(f"cuda:{MPI.COMM_WORLD.Get_rank() % GPUS_PER_NODE}")
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl")
            rank = dist.get_rank()
            torch.cuda.set_device(rank)
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import os
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            rank = int(os.environ.get("RANK", 0))
            device = torch.device("cuda", rank)
            model = DDP(model.to(f"cuda:{rank}"), device_ids=[rank])
            """,
            lines=(5,),
        ),
        Invalid(
            """
            # Aliased and fully dotted: the same call.
            import torch
            import torch.distributed as D
            torch.cuda.set_device(D.get_rank())
            x = torch.ones(1).cuda(torch.distributed.distributed_c10d.get_rank())
            """,
            lines=(4, 5),
        ),
        Invalid(
            """
            import os
            import torch
            gpu = os.environ["RANK"]
            state = torch.load("ckpt.pt", map_location="cuda:%s" % gpu)
            """,
            lines=(3,),  # (where the rank is read into a name for a GPU)
        ),
    ]

    def finish(self) -> None:
        # One finding per read of the rank: the fix goes where the rank is read (or chosen), and
        # a value used as the device in twenty places would otherwise bury the report.
        model = self.model
        if model.on_one_machine():
            return  # an mp.spawn job that meets on localhost: the global rank is the local one
        # The read of the rank (a leaf node, unique across modules) -> the leaf and its uses,
        # each with the device string the rank was built into in a variable first (`dev =
        # f"cuda:{rank}"`), if any.
        Use = tuple[CallSite, cst.BaseExpression, cst.BaseExpression, str, "Value | None"]
        # Keyed by the read and, for a rank read in a module's top-level code and used as a
        # device in another module that imports it (`from utils_ddp import RANK`), by the using module: each module's
        # uses are their own fix (the value itself is the global rank, right for the process
        # group and the seed).
        uses: dict[tuple[int, int], tuple[Value, list[Use]]] = {}
        for site in model.paths.sites():
            if model.paths.never_runs(site):
                continue  # a set-up left beside the one the run uses (`def train_v1(...)` nothing calls)
            for index in self._device_indices(site):
                for expr in _index_values(index):
                    found = self._origin(site, expr)
                    if found:
                        source, origin, built = found
                        read = _read_through(origin)
                        key: tuple[int, int] = (id(read.node), 0) if read is not None else \
                            (id(origin.node), 0 if site.module is origin.module or origin.frame is not None
                             or origin.scope is not origin.module.module_scope else id(site.module))
                        uses.setdefault(key, (origin, []))[1].append((site, index, expr, source, built))
                        break
        for origin, group in uses.values():
            # Shown where the value is read and first used (its own function), not wherever the
            # walk met it first.
            read = _read_through(origin)
            home = (read.module, read.scope) if read is not None else (origin.module, origin.scope)
            group.sort(key=lambda use: (use[0].module is not home[0], use[0].scope is not home[1]))
            site, index, expr, source, text_value = group[0]
            text = " ".join(site.module.code(expr).split())
            message = (self.MODULO_MESSAGE if "%" in source else self.MESSAGE).format(index=text, source=source)
            more = len({id(use[1]) for use in group[1:]} - {id(index)})
            if more:
                message += f" (the same value is the device in {more} more place{'s' if more > 1 else ''})"
            where, module = index, site.module
            if text_value is not None and isinstance(text_value.node, cst.CSTNode):
                # `dev = f"cuda:{rank}"`: the rank becomes a device where the string is built.
                where, module = text_value.node, text_value.module
            elif isinstance(expr, cst.Name) and _DEVICE_NAME.search(expr.value) and isinstance(origin.node, cst.CSTNode):
                handed = self._handed_to_parameter(site, expr)
                if handed:
                    # `Dataset_dali(root, batch, workers, self.rank)` into a parameter named
                    # `device_id`: the rank becomes a device where each caller hands it over.
                    for caller, passed, shown in handed:
                        self.report(passed, self.MESSAGE.format(index=shown, source=source), module=caller.module,
                                    related=[*model.paths.chain(caller), site])
                    continue
                # `gpu_id = dist.get_rank()`: the rank becomes a device where the name is bound.
                where, module = origin.node, origin.module
            self.report(where, message, module=module, related=model.paths.chain(site))

    def _handed_to_parameter(self, site: CallSite, name: cst.Name) -> list[tuple[CallSite, cst.BaseExpression, str]]:
        """The arguments holding the global rank that the callers of `site`'s function pass to
        its parameter `name` (named for a device): where each caller makes the rank a device."""
        model = self.model
        function = model.paths.function_of(site)
        if function is None:
            return []
        bindings = site.scope.assignments.get(name.value, [])
        param = next((p for p in function.params() if p.name == name.value), None)
        if param is None or any(b is not param for b in bindings):
            return []  # (a parameter the function sets again holds its own value there)
        out: list[tuple[CallSite, cst.BaseExpression, str]] = []
        for caller, bound in model.graph.callers(function):
            passed = model.graph.argument_for(caller, function, param, bound)
            if isinstance(passed, cst.BaseExpression) and self._origin(caller, passed) is not None:
                out.append((caller, passed, " ".join(caller.module.code(passed).split())))
        return out

    def _origin(self, site: CallSite, expr: cst.BaseExpression) -> tuple[str, Value, Value | None] | None:
        for value in self.model.values.at_call(site, expr):
            found = self._rank_in(value)
            if found:
                return found[0], found[1], None
            found = self._in_device_text(value)
            if found:
                return found[0], found[1], value
        return None

    def _rank_in(self, value: Value) -> tuple[str, Value] | None:
        found = global_rank_origin(self.model, value) or self._modulo_constant(value) \
            or self._in_mapping(value) or self._rank_block(value) or self._composed_rank(value) \
            or self._shifted_rank(value) or self._listed_by_rank(value)
        if found and _fallback_without_local_rank(value, found[0]):
            return None  # read only where the launcher gave no local rank (see below)
        return found

    def _in_device_text(self, value: Value) -> tuple[str, Value] | None:
        """A device string built in a variable first (`dev = f"cuda:{rank}"`, then
        `torch.device(dev)`): the GPU number inside it."""
        node = value.node
        if not isinstance(node, (cst.FormattedString, cst.BinaryOperation, cst.Call)):
            return None
        inner = _index_values(node)
        if any(e is node for e in inner):
            return None  # not a device string (`rank + offset` is read as any index is)
        for expr in inner:
            for held in self.model.values.of(value.module, expr, value.scope, value.frame, at=value.at):
                found = self._rank_in(held)
                if found:
                    return found
        return None

    def _composed_rank(self, value: Value) -> tuple[str, Value] | None:
        """`node_rank * ngpus_per_node + gpu` (the rank a multi-machine `mp.spawn` script makes for
        itself from the machine's number, its GPU count and the spawn index): the global rank,
        whatever the operands are called. The count must read as the GPUs or processes of one
        machine (`torch.cuda.device_count()`, a literal, `ngpus_per_node`, `args.gpus`,
        `nproc_per_node`); the other two must be values, not literals."""
        node = value.node
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, cst.Add):
            return None
        for product, index in ((node.left, node.right), (node.right, node.left)):
            if not isinstance(product, cst.BinaryOperation) or not isinstance(product.operator, cst.Multiply) \
                    or not isinstance(index, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) \
                    or int_value(index) is not None:
                continue
            for machine, count in ((product.left, product.right), (product.right, product.left)):
                if isinstance(machine, (cst.Name, cst.Attribute)) and self._machine_gpus(value, count):
                    text = " ".join(value.module.code(node).split())
                    return text, value
        return None

    def _shifted_rank(self, value: Value) -> tuple[str, Value] | None:
        """`rank - 1` (or `rank + 1`) kept in a variable: the global rank moved by a fixed number
        (`gpu_index = rank - 1` where rank 0 does no GPU work) still grows with the node's
        number, so past the first node it names GPUs the machine does not have. Only a literal
        shift counts: `rank - node_rank * gpus` is a local rank computed by hand."""
        node = value.node
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, (cst.Subtract, cst.Add)):
            return None
        shift = int_value(node.right)
        if shift is None:
            return None
        for inner in self.model.values.of(value.module, node.left, value.scope, value.frame, at=value.at):
            found = global_rank_origin(self.model, inner)
            if found:
                # (The shifted value is the origin: `gpu_index = rank - 1` is where the rank
                # becomes a device.)
                sign = "-" if isinstance(node.operator, cst.Subtract) else "+"
                return f"{found[0]} {sign} {shift}", value
        return None

    def _listed_by_rank(self, value: Value) -> tuple[str, Value] | None:
        """`config.gpu_ids[rank]` with `rank = dist.get_rank()`: a list of GPUs (its name says
        so: `gpu_ids`, `devices`) looked up by the global rank. On a second node the lookup runs
        past the list, or past the machine's GPUs. The lookup is where the rank becomes a
        device."""
        node = value.node
        if not isinstance(node, cst.Subscript) or len(node.slice) != 1 \
                or not isinstance(node.slice[0].slice, cst.Index):
            return None
        base = dotted(node.value) if isinstance(node.value, (cst.Name, cst.Attribute)) else None
        if base is None or not _DEVICE_NAME.search(base.rsplit(".", 1)[-1]):
            return None
        key = node.slice[0].slice.value
        for inner in self.model.values.of(value.module, key, value.scope, value.frame, at=value.at):
            found = global_rank_origin(self.model, inner)
            if found:
                return f"{base}[{found[0]}]", value
        return None

    def _machine_gpus(self, value: Value, count: cst.BaseExpression) -> bool:
        """`count` is the number of GPUs (or processes) of one machine."""
        name = dotted(count) if isinstance(count, (cst.Name, cst.Attribute)) else None
        if name is not None and _MACHINE_COUNT.match(name.rsplit(".", 1)[-1]):
            return True
        counts = self.model.values.of(value.module, count, value.scope, value.frame, at=value.at)
        return bool(counts) and all(
            isinstance(c.node, cst.CSTNode) and int_value(c.node) is not None
            or c.call is not None and self.model.api_of(c) in _DEVICE_COUNT
            for c in counts)

    def _in_mapping(self, value: Value) -> tuple[str, Value] | None:
        """A `map_location` dict kept in a variable (`{"cuda:0": f"cuda:{rank}"}`): its targets are
        the devices the checkpoint lands on."""
        if not isinstance(value.node, cst.Dict):
            return None
        model = self.model
        for element in value.node.elements:
            if not isinstance(element, cst.DictElement):
                continue
            for expr in _index_values(element.value):
                for inner in model.values.of(value.module, expr, value.scope, value.frame, at=value.at):
                    found = global_rank_origin(model, inner) or self._modulo_constant(inner)
                    if found:
                        return found
        return None

    def _rank_block(self, value: Value) -> tuple[str, Value] | None:
        """`device_ids[0]` of `list(range(rank * n, (rank + 1) * n))`: the first GPU of the block of
        `n` GPUs given to each process, numbered by the global rank. With `n` a fixed number or
        the GPUs of the machine divided among its own processes, the block of rank 8 lies past
        the machine's GPUs; divided among every process of the job (`// world_size`) it stays
        within them and is not reported, nor is a factor the analysis cannot read."""
        node = value.node
        if not isinstance(node, cst.Subscript) or len(node.slice) != 1 \
                or not isinstance(node.slice[0].slice, cst.Index) or int_value(node.slice[0].slice.value) is None:
            return None
        model = self.model
        for base in model.values.of(value.module, node.value, value.scope, value.frame, at=value.at):
            call = base.call
            if call is not None and dotted(call.func) == "list" and len(call.args) == 1 \
                    and isinstance(call.args[0].value, cst.Call):
                call = call.args[0].value
            if call is None or dotted(call.func) != "range" or len(call.args) < 2:
                continue
            for start in model.values.of(base.module, call.args[0].value, base.scope, base.frame, at=base.at):
                found = self._scaled_rank(start)
                if found:
                    return found
        return None

    def _scaled_rank(self, value: Value) -> tuple[str, Value] | None:
        node = value.node
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, cst.Multiply):
            return None
        model = self.model
        for rank_side, factor in ((node.left, node.right), (node.right, node.left)):
            factors = model.values.of(value.module, factor, value.scope, value.frame, at=value.at)
            if not factors or not all(self._per_machine_count(f) for f in factors):
                continue
            for inner in model.values.of(value.module, rank_side, value.scope, value.frame, at=value.at):
                found = global_rank_origin(model, inner)
                if found:
                    return f"{found[0]} * {' '.join(value.module.code(factor).split())}", found[1]
        return None

    def _per_machine_count(self, value: Value) -> bool:
        """A fixed number of GPUs, or a count divided by the processes of one machine (a literal,
        `LOCAL_WORLD_SIZE`, or a setting named for it, `args.local_world_size`)."""
        node = value.node
        if isinstance(node, cst.CSTNode) and int_value(node) is not None:
            return True
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, (cst.FloorDivide, cst.Divide)):
            return False
        divisors = self.model.values.of(value.module, node.right, value.scope, value.frame, at=value.at)
        return bool(divisors) and all(_per_machine_processes(d) for d in divisors)

    def _modulo_constant(self, value: Value) -> tuple[str, Value] | None:
        """`rank % 8` (or `% GPUS_PER_NODE` set to a literal): the global rank folded by a fixed
        GPU count, right only on nodes that have exactly that many GPUs. `rank %
        torch.cuda.device_count()` asks the machine and is not reported."""
        node = value.node
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, cst.Modulo):
            return None
        model = self.model
        counts = model.values.of(value.module, node.right, value.scope, value.frame, at=value.at)
        literals = {int_value(c.node) if isinstance(c.node, cst.CSTNode) else None for c in counts}
        if len(literals) != 1 or None in literals:
            return None
        for inner in model.values.of(value.module, node.left, value.scope, value.frame, at=value.at):
            found = global_rank_origin(model, inner)
            if found:
                return f"{found[0]} % {literals.pop()}", found[1]
        return None

    def _device_indices(self, site: CallSite) -> list[cst.BaseExpression]:
        found: list[cst.BaseExpression | None] = []
        name = self.model.api(site)
        if name in api.SET_DEVICE:
            found.append(site.arg("device", 0))
        elif name == api.TORCH_DEVICE:
            first = site.arg("type", 0)
            if first is not None and _is_cuda_text(first):
                found += [first, site.arg("index", 1)]
            elif first is not None and string_text(first) is None and site.arg("index", 1) is None:
                found.append(first)  # `torch.device(rank)`: a bare number is the accelerator's device index
        elif name == api.DDP:
            ids = site.arg("device_ids", 1)
            if isinstance(ids, (cst.List, cst.Tuple)):
                found += [e.value for e in ids.elements]
            elif isinstance(ids, (cst.Name, cst.Attribute)):
                # `device_ids = [rank] if torch.cuda.is_available() else None`, then
                # `DDP(model, device_ids=device_ids)` (or the list kept on an object first,
                # `args.device_ids = device_ids`): the lists the name holds, read where they are
                # made (in the same function, so their names are read at the call).
                for held in self.model.values.at_call(site, ids):
                    if isinstance(held.node, (cst.List, cst.Tuple)) and held.module is site.module \
                            and held.scope is site.scope:
                        found += [e.value for e in held.node.elements]
        elif site.method in ("cuda", "to") and site.qualname is None and site.node.args and site.node.args[0].keyword is None:
            found.append(site.node.args[0].value)
        for keyword in _DEVICE_KEYWORDS:
            found.append(site.arg(keyword))
        return [e for e in found if e is not None]


# The global rank a launcher sets beside each local-rank variable.
_PAIRED_RANK = {"LOCAL_RANK": "RANK", "SLURM_LOCALID": "SLURM_PROCID",
                "OMPI_COMM_WORLD_LOCAL_RANK": "OMPI_COMM_WORLD_RANK"}


def _read_through(origin: Value) -> CallSite | None:
    """The call of a project helper that hands back the global rank (`def distributed_rank():
    return dist.get_rank()`), where the rank was read through one: each call of it is a read of
    its own, whose value the caller decides to use as a device (the helper serves seeding and
    `is_main_process` too), so the fix goes at each such call. None where the rank was read in
    place, or through a helper whose name says it hands back a device (`get_device()`: the fix
    is in the helper, once)."""
    frame = origin.frame
    if frame is None:
        return None
    while frame.caller is not None:
        frame = frame.caller
    if frame.bound not in ("", "method") or _DEVICE_NAME.search(frame.function.name):
        return None  # (an attribute of an object a constructor built is one value, read once)
    return frame.call


def _fallback_without_local_rank(value: Value, source: str) -> bool:
    """The environment's global rank read only where that launcher's local rank is absent: the
    `elif "RANK" in os.environ:` (or `else`) of `if "LOCAL_RANK" in os.environ:`. A launcher
    that sets RANK for a job on several machines (torchrun, `torch.distributed.launch`) sets
    LOCAL_RANK beside it, so the first arm is taken wherever the two could differ; the fallback
    runs only in a launch that gives a global rank alone, one machine's. Only the variable of
    the same launcher counts (`SLURM_PROCID` read where `LOCAL_RANK` is absent is the rank of
    an `srun` job, which may span machines)."""
    for guard in value.conditions:
        test = guard.test
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        comp = test.comparisons[0]
        local = string_text(test.left)
        if not isinstance(comp.operator, (cst.In, cst.NotIn)) or local not in _PAIRED_RANK \
                or (dotted(comp.comparator) or "").rsplit(".", 1)[-1] != "environ":
            continue
        if guard.negated == isinstance(comp.operator, cst.In) and source == f'os.environ["{_PAIRED_RANK[local]}"]':
            return True
    return False


def _per_machine_processes(value: Value) -> bool:
    node = value.node
    if not isinstance(node, cst.CSTNode):
        return False
    if int_value(node) is not None:
        return True
    if "LOCAL_WORLD_SIZE" in value.module.code(node):
        return True
    name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    last = name.rsplit(".", 1)[-1].lower() if name else ""
    return last.startswith("local_") and ("world" in last or "size" in last)


def _is_cuda_text(expr: cst.BaseExpression) -> bool:
    text = string_text(expr)
    return text is not None and text.startswith("cuda")


def _index_values(index: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions that give the GPU number inside a device argument: `x` in `x`,
    `f"cuda:{x}"`, `"cuda:%d" % x`, `"cuda:{}".format(x)`, `"cuda:" + str(x)`."""
    if isinstance(index, cst.FormattedString):
        if _is_cuda_text(index):
            return [p.expression for p in index.parts if isinstance(p, cst.FormattedStringExpression)]
        return []
    if isinstance(index, cst.BinaryOperation) and _is_cuda_text(index.left):
        if isinstance(index.operator, (cst.Modulo, cst.Add)):
            right = index.right
            if isinstance(right, cst.Tuple):
                return [e.value for e in right.elements]
            return [right]
        return []
    if isinstance(index, cst.Call) and isinstance(index.func, cst.Attribute) and index.func.attr.value == "format":
        if _is_cuda_text(index.func.value):
            return [a.value for a in index.args]
        return []
    if isinstance(index, cst.Call) and dotted(index.func) in ("torch.device", "device") and index.args \
            and all(a.keyword is None for a in index.args):
        # `map_location=torch.device(rank)`: a bare number is a device index of the accelerator (CUDA).
        first = index.args[0].value
        if len(index.args) == 1 and string_text(first) is None:
            return [first]
        if len(index.args) == 2 and (_is_cuda_text(first) or not isinstance(
                first, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))):
            # `torch.device(config["DEVICE"], rank)`: a type chosen at run time, given an index —
            # an index only means something for an accelerator.
            return [index.args[1].value]
        return []
    if isinstance(index, cst.Dict):
        # `map_location={"cuda:0": f"cuda:{rank}"}`: the targets are where the tensors go.
        return [e for el in index.elements if isinstance(el, cst.DictElement) for e in _index_values(el.value)]
    if isinstance(index, (cst.SimpleString, cst.ConcatenatedString)):
        return []
    if isinstance(index, cst.BinaryOperation) and isinstance(index.operator, cst.Add):
        # `dist.get_rank() + args.skip_devices`: an offset moves the global rank further past
        # the local GPUs, it does not bring it back.
        return [index, *_index_values(index.left), *_index_values(index.right)]
    return [index]
