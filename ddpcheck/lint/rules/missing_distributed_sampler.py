from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.ddp import (
    global_rank_source, is_eval_name, is_local_rank, iterates, loops_over, plainly_local, sampler_option, sampler_values,
    splits_by_rank, training_scopes,
)
from ddpcheck.lint.model.module import CallSite, ClassInfo, Item, ModuleModel, Param, Scope, Shared
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.conditions import is_rank_value
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.shares import is_own_share
from ddpcheck.lint.model.syntax import children, dotted, is_none, string_text, subexpressions
from ddpcheck.lint.model.values import Frame, Value
from ddpcheck.lint.rule import Invalid, Rule

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model


# Code that plans for more than one machine: a node count or node rank, SLURM's variables, the
# hosts of a job.
_MACHINES = re.compile(
    r"SLURM_|\bnodes?_?rank\b|\b(?:n?gpus|devices)_per_node\b|NODE_RANK|GROUP_RANK|hostnames?\b|\bnodelist\b",
    re.IGNORECASE,
)
# Words that count machines in launch code but graph nodes in a graph network's code (`n_nodes`,
# `node_idx`): they count only in a module that sets the run up (starts the process group, reads
# the environment or the command line).
_MACHINES_OR_GRAPH = re.compile(
    r"\b(?:n|num|total|number_of|world)_?nodes\b|\bnodes?_?(?:id|idx|num|count)\b|current_node",
    re.IGNORECASE,
)
_SETS_UP_RUN = re.compile(r"init_process_group|environ|add_argument|argv|initialize_model_parallel")
# Every branch of _MACHINES and _MACHINES_OR_GRAPH holds one of these words: a text without them
# cannot match, and this search is several times faster than the full ones (which most texts do
# not match).
_MACHINE_WORDS = re.compile(r"slurm_|node|group_rank|host", re.IGNORECASE)


# Asked of the linted file's text and of every project module it imports, for each file linted.
@functools.lru_cache(maxsize=64)
def _plans_machines(text: str) -> bool:
    code = code_only(text)
    if code.isascii():
        # The same test as _MACHINE_WORDS; on ASCII text, lowering it is exactly IGNORECASE.
        lower = code.lower()
        if "slurm_" not in lower and "node" not in lower and "group_rank" not in lower and "host" not in lower:
            return False
    elif _MACHINE_WORDS.search(code) is None:
        return False
    return bool(_MACHINES.search(code) or _MACHINES_OR_GRAPH.search(code) and _SETS_UP_RUN.search(code))


def _names_machines(model: Model) -> bool:
    """Whether the code of the linted file or of a project module it imports (comments and
    docstrings left out) plans for several machines: a job whose code never counts nodes or
    reads a scheduler's hosts runs on one, where the local rank is the rank."""
    found = model.root.memo.get("names_machines")
    if found is None:
        found = any(_plans_machines(text) for text in model.graph.import_closure(model.root))
        model.root.memo["names_machines"] = found
    return bool(found)


def _iterates_what_it_is_given(function: cst.FunctionDef, chain: list[tuple[ModuleModel, ClassInfo]]) -> bool:
    """`__iter__` loops over (or calls into) an attribute the constructor set straight from one
    of its parameters (`for s in self._source.as_numpy_iterator():` after `self._source =
    source`): what it yields is whatever the caller handed in."""
    for node in _walk(function.body):
        if isinstance(node, cst.For):
            source: cst.BaseExpression = node.iter
        elif isinstance(node, cst.From):
            source = node.item
        else:
            continue
        for name in _roots(source):
            for _, info in chain:
                for bound in info.scope.assignments.get(name, ()):
                    value = bound.value if isinstance(bound, Shared) else bound
                    if isinstance(value, cst.Name) and isinstance(bound, Shared) and any(
                            isinstance(b, Param) for b in bound.scope.assignments.get(value.value, ())):
                        return True
    return False


def _roots(source: cst.BaseExpression) -> list[str]:
    """The `self.x` attributes an iterable is taken from: `self.x`, `self.x.method(...)`,
    `self.x[...]`, and those inside `iter(...)`, `enumerate(...)`, `zip(...)`."""
    if isinstance(source, cst.Attribute):
        name = dotted(source)
        return [name] if name is not None and name.startswith("self.") and name.count(".") == 1 else []
    if isinstance(source, cst.Subscript):
        return _roots(source.value)
    if isinstance(source, cst.Call):
        func = source.func
        if isinstance(func, cst.Attribute):
            return _roots(func.value)
        if dotted(func) in ("iter", "enumerate", "zip", "reversed", "sorted", "list", "tuple"):
            return [name for a in source.args for name in _roots(a.value)]
    return []


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        if not isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            stack.extend(children(current))
    return out


def _names_global_rank(node: object) -> bool:
    """`rank`, `args.rank`, `global_rank`: a name for the rank in the job, not on the machine."""
    if not isinstance(node, (cst.Name, cst.Attribute)):
        return False
    name = (dotted(node) or "").rsplit(".", 1)[-1].lower()
    return "rank" in name and "local" not in name


# Words in a dataset's code or arguments that may split its items between ranks or workers.
_SHARDS = re.compile(r"rank|world|shard|split|replica|node|worker|distributed|islice|::", re.I)


class MissingDistributedSampler(Rule):
    """A DataLoader in a DDP script has no DistributedSampler, so every rank reads the whole dataset.

    ## Why it matters
    Without a `DistributedSampler` (or a `batch_sampler` that shards), each of the N ranks iterates
    over the full dataset. The job does N times the work per epoch for the same result: an epoch
    takes as long as on one GPU and each sample is seen N times per epoch, which also changes the
    effective batch statistics. Nothing crashes; training is just slower and subtly different.

    Also reported: a training `DistributedSampler` given the local rank as `rank=` (LOCAL_RANK,
    `args.local_rank`, a spawned worker's `local_rank` index) in a job that can span machines
    and plans for it — its code or a project module it imports counts nodes or reads a node
    rank, SLURM's variables or a job's hosts (`num_nodes`, `node_rank`, `SLURM_PROCID`): the
    shards are numbered across the job, so on more than one node every node reads the same
    shards and the others are never read. A job whose code never mentions a second machine runs
    on one, where the local rank is the rank, and is not reported; a node count or node index
    (`n_nodes`, `num_nodes`, `node_idx`) counts only in a module that sets the run up (starts the
    process group, reads the environment or the command line), since in a graph network's code
    it counts the nodes of a graph. The same holds for a project `Sampler` subclass that splits
    among the processes by a `rank=` it keeps (its class reads `self.rank` and a `world_size` or
    `num_replicas`, as `DistMultiTaskBatchSampler(datasets, bs, rank=args.local_rank,
    world_size=args.world_size)` does).

    Not reported: loaders built in a branch no run takes (`if source == "toy":` in a builder
    every caller hands `source="web"`), loaders of a function that hands its training to another
    engine (`deepspeed.initialize(...)` shards its own), loaders made in the process that starts
    the workers (beside `mp.spawn`: its single-GPU fallback; or, in a script that torchrun cannot start
    and that sets the process group up only in the workers it spawns, in a function no worker
    enters: `elif args.mode == "inspect": inspect_batch(args)`) unless a worker trains on them
    (`mp.spawn(train, args=(n, [loader] * n))`, then `for x, y in loaders[rank]:`), loaders built only on rank 0 (e.g. for evaluation on the
    main process; also in a function the run calls only under a rank-0 test, `if rank == 0:
    self.sampling(step)`, followed three calls up) or only in the non-distributed branch of a script (`if not args.distributed:`, or the else of `if
    parallel:` where `parallel` is set True only where the process group is set up and False
    where it is not; also in a function that only such a branch calls, `if args.distributed:
    train_ddp(cfg)` / `else: train(cfg)`, followed three calls up), loaders
    over an `IterableDataset` (they must shard themselves; `ddpcheck run` checks that at run time)
    — a torch one or a project subclass, also when a builder of another module makes it, unless
    the project subclass is read whole and plainly yields the same items on every rank (its code
    and the arguments it is made with mention no rank, world size, shard, split, node or worker,
    and its bases are the project's own and torch's `IterableDataset`; one whose `__iter__`
    streams an object it was handed, such as a data pipeline, stays silent), and
    loaders built where `isinstance(dataset, IterableDataset)` holds (builders that take the
    dataset from a registry and choose the loader by its kind) —
    loaders given any `sampler=`/`batch_sampler=` that is not plainly a non-distributed sampler,
    loaders given `**options` that may hold one (a dict whose keys cannot all be read: the
    literal dicts, `{**a, **b}`, `dict(a, **b)` and `kw.update(...)` of torch's own DataLoader
    are read), and
    datasets made with the rank (`ImageDataset(files, shard=rank, num_shards=world)`: they shard
    themselves) or by a project class or builder that keeps its own rank's part (`i % world ==
    rank`, `np.array_split(files, world)[rank]`, `rows[rank::world]`; also when it is handed rows such a builder returned:
    `QADataset(load_rows(path, rank, world))`, through a name), and evaluation loaders (named `val*`, `test*`, `eval*`, or over a dataset so named:
    `DataLoader(dataset_val, ...)`): evaluating the full set
    on every rank costs time but is not wrong — also a loader in a builder's branch that its
    training call's arguments close and every other call binds to an evaluation name (`val_loader
    = make_loader(ds, tag="val")`, a method's `self.valid_loader = self._loader("valid", False)`). A builder's loader goes by the names its callers
    bind it to, except callers whose arguments rule its branch out (`make_loader(cfg,
    tag="train")` never gets the loader of the `else` of `if tag == "train":`). A loader built by a function of another module of
    the project (`build_loader(cfg)`) is reported there, with the call that leads to it. A
    project subclass of DataLoader is read through its constructor: the sampler it hands
    `super().__init__(...)` is its sampler (unknown, and not reported, when the model cannot see
    that call).

    ## How to fix
    Build a `DistributedSampler(dataset)` and pass it as `sampler=`; drop `shuffle=True` from the
    loader (the sampler shuffles) and call `sampler.set_epoch(epoch)` at the start of each epoch.

    ## References
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP001"
    name = "missing-distributed-sampler"
    severity = Severity.WARNING
    MESSAGE = (
        "DataLoader has no DistributedSampler: every rank reads the whole dataset; pass "
        "`sampler=DistributedSampler(dataset)` and drop `shuffle=True`"
    )
    _stream = False  # the loader being judged streams an IterableDataset that does not shard
    STREAM_MESSAGE = (
        "this IterableDataset yields every item on every rank and the DataLoader cannot take a "
        "sampler for it: every rank reads the whole stream; skip the other ranks' items in "
        "`__iter__` (e.g. `itertools.islice(items, rank, None, world_size)`)"
    )

    VALID = [
        """
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        """,
        """
        # Aliased and fully dotted names resolve the same.
        import torch
        from torch.utils.data.distributed import DistributedSampler as DS
        torch.distributed.init_process_group("gloo")
        loader = torch.utils.data.DataLoader(dataset, sampler=DS(dataset))
        """,
        """
        # Rank-0-only evaluation loader.
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            loader = DataLoader(dataset, batch_size=64)
        """,
        """
        # Not a DDP script at all.
        from torch.utils.data import DataLoader
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        """,
        """
        # An IterableDataset shards itself.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, IterableDataset
        class Stream(IterableDataset):
            def __iter__(self):
                yield from range(dist.get_rank(), 100, dist.get_world_size())
        dist.init_process_group("gloo")
        loader = DataLoader(Stream(), batch_size=8)
        """,
        """
        # A builder that takes the dataset from a registry picks the loader by the dataset's kind.
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        dist.init_process_group("nccl")
        def build_loader(name, cfg):
            dataset = DATASETS[name](cfg)
            if isinstance(dataset, torch.utils.data.IterableDataset):
                return DataLoader(dataset, batch_size=8)
            return DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        """,
        """
        # The sampler comes from a helper or is chosen by a flag: not plainly wrong.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        dist.init_process_group("gloo")
        sampler = DistributedSampler(dataset) if distributed else None
        loader = DataLoader(dataset, sampler=sampler, shuffle=(sampler is None))
        other = DataLoader(dataset, batch_sampler=make_batch_sampler(dataset))
        """,
        """
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        dist.init_process_group("gloo")
        val_loader = DataLoader(val_set, batch_size=64)
        """,
        """
        # The single-GPU branch of a script with a --distributed flag.
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        if args.distributed:
            dist.init_process_group("nccl")
            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        else:
            loader = DataLoader(dataset, batch_size=64, shuffle=True)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            from torch.utils.data import DataLoader

            dist.init_process_group("gloo")
            loader = DataLoader(dataset, batch_size=64, shuffle=True)
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model)
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=None)
            """,
            lines=(4,),
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader, RandomSampler
            from torch.utils.data.distributed import DistributedSampler
            loader = DataLoader(dataset, sampler=RandomSampler(dataset))
            """,
            lines=(3,),
        ),
    ]

    LOCAL_RANK_MESSAGE = (
        "this DistributedSampler is given the local rank as `rank=`: on more than one node every "
        "node reads the shards of its first GPUs' ranks and the other shards are never read; pass "
        "the global rank (`dist.get_rank()`), or leave `rank=`/`num_replicas=` to the process group"
    )

    PROJECT_LOCAL_RANK_MESSAGE = (
        "this sampler splits among the processes by its `rank=` and is given the local rank: on more "
        "than one node every node reads the shards of its first GPUs' ranks and the other shards are "
        "never read; pass the global rank (`dist.get_rank()`)"
    )

    def finish(self) -> None:
        # Decided at the end: whether the file uses DDP may only become clear after the loader.
        if not self.model.uses_ddp:
            return
        for site in self.model.paths.sites():
            self._stream = False
            if self.model.makes(site, api.DATALOADER) and self._unsharded(site):
                self.report(site.node, self.STREAM_MESSAGE if self._stream else None, module=site.module,
                            related=self.model.paths.chain(site))
            elif self.model.makes(site, api.DISTRIBUTED_SAMPLER) and self._local_rank_shard(site):
                self.report(site.node, self.LOCAL_RANK_MESSAGE, module=site.module,
                            related=self.model.paths.chain(site))
            elif self._shards_by_rank(site) and self._local_rank_shard(site, project=True):
                self.report(site.node, self.PROJECT_LOCAL_RANK_MESSAGE, module=site.module,
                            related=self.model.paths.chain(site))

    def _shards_by_rank(self, site: CallSite) -> bool:
        """A project `Sampler` subclass (not a DistributedSampler) built with `rank=` that keeps
        it and splits among the processes by it (its class reads `self.rank` and a
        `world_size`/`num_replicas`): a sampler written to shard as DistributedSampler does
        (`DistMultiTaskBatchSampler(datasets, bs, rank=..., world_size=...)`)."""
        target = site.target
        if target is None or target.kind != "class" or not site.has_keyword("rank") \
                or self.model.makes(site, api.DISTRIBUTED_SAMPLER) or not self.model.graph.is_subclass(target, api.SAMPLER):
            return False
        found = self.model.graph.class_at(target)
        if found is None:
            return False
        code = code_only(found[0].code(found[1].node))
        return "self.rank" in code and ("world_size" in code or "num_replicas" in code)

    def _local_rank_shard(self, site: CallSite, project: bool = False) -> bool:
        """A DistributedSampler (or, `project`, a project sampler that shards by its `rank=`)
        whose `rank=` is, on every path, the process's index on its own machine (LOCAL_RANK,
        `args.local_rank`, a worker's `local_rank` spawn index), in a job that can span
        machines: the shards are numbered across the job, so the nodes all read the same ones."""
        model = self.model
        if project:
            given = site.arg("rank")
            rank = model.values.at_call(site, given) if given is not None else None
        else:
            rank = sampler_option(model, site, "rank", 2)
        if not rank or model.on_one_machine() or not _names_machines(model) \
                or model.paths.never(site) is not None or model.paths.dead(site):
            return False
        if project:
            counts = [site.arg(k) for k in ("num_replicas", "world_size")]
            replicas = [v for c in counts if c is not None for v in model.values.at_call(site, c)]
        else:
            replicas = sampler_option(model, site, "num_replicas", 1) or []
        if replicas and all(isinstance(v.node, cst.Call) and not v.node.args
                            and (dotted(v.node.func) or "").endswith("device_count") for v in replicas):
            return False  # shards counted by this machine's GPUs: a job of one machine, numbered locally
        dataset = site.arg("dataset", 0)
        if any(is_eval_name(n) for n in site.module.assigned_names(site.node)) \
                or dataset is not None and is_eval_name(dotted(dataset)):
            return False  # an evaluation set's shards: as with its loader, not this rule's concern
        if all(is_local_rank(model, v) for v in rank):
            return True
        # Passed under the name `local_rank` (a worker's parameter, `args.local_rank`): the
        # author's own word for it, unless some value it takes is a global rank after all.
        passed = site.arg("rank", None if project else 2)
        if passed is None or (dotted(passed) or "").rsplit(".", 1)[-1] != "local_rank":
            return False
        return not any(global_rank_source(model, v) is not None or _names_global_rank(v.node) for v in rank)

    def _unsharded(self, site: CallSite) -> bool:
        model = self.model
        values, via_batch = sampler_values(model, site)
        if via_batch and values and not all(is_none(v.node) for v in values):
            return False  # a batch sampler decides the shards
        if values and not plainly_local(model, values):
            return False  # distributed, or something we cannot see into
        if not values and site.has_star_kwargs and not self._options_known(site):
            return False  # options passed on whole: the sampler may be among them
        dataset = site.arg("dataset", 0)
        if dataset is not None and (self._iterable(site, dataset) or self._narrowed(site, dataset)):
            return False
        if any(is_eval_name(name) for name in site.module.assigned_names(site.node)):
            return False
        known = self._known_names(site)
        if any(is_eval_name(name) for name in known) and not any("train" in name.lower() for name in known):
            return False  # handed on as `test_loader`, kept in a dict that is: an evaluation loader
        if dataset is not None and is_eval_name(dotted(dataset)) and not any("train" in n.lower() for n in known):
            return False  # over the evaluation set (`DataLoader(dataset_val, ...)`): an evaluation loader
        if self._built_for_evaluation_only(site):
            return False
        if model.paths.main_only(site) or model.paths.single_up(site) or self._called_on_main_only(site):
            return False
        if model.paths.engine_run(site):
            return False  # another engine's loader
        if (model.paths.launcher_only(site) or model.paths.outside_workers(site)) \
                and not self._trained_on_in_workers(site):
            return False  # one in the process that starts the workers, for its own use
        if model.paths.never(site) is not None or model.paths.dead(site):
            return False  # a branch no run takes (`if kind == "toy":` that every caller leaves)
        if self._read_only_to_evaluate(site):
            return False
        return True

    def _trained_on_in_workers(self, site: CallSite) -> bool:
        """A loader the starting process makes and hands to the workers (`mp.spawn(train,
        args=(world_size, loaders))`, then `for x, y in loaders[rank]:`): a loop that iterates it
        back-propagates, in a function the workers run. Each worker reads the whole set."""
        model = self.model
        for module, loop in loops_over(model, site.node):
            if loop.scope.kind != "function" or id(loop.scope) not in training_scopes(model, module):
                continue
            function = loop.scope.qualname
            if not any(model.api(c) in api.SPAWN for c in module.calls_in(function)):
                return True
        return False

    def _called_on_main_only(self, site: CallSite) -> bool:
        """Every call of the run that reaches the loader's function, followed three calls up, runs
        under a rank-0 test (`if self.local_rank == 0: self.sampling(i)`, where `sampling` builds
        a loader to draw a few images to show): the other ranks never make the loader."""
        paths = self.model.paths
        if paths.function_of(site) is None:
            return False
        guards = paths.rank_guards_up(site, 3)
        if not guards:
            return False
        for call, guard in guards:
            kind = paths.kind(call.module, guard, call.scope)
            if kind != "main" and not (kind == "flag" and not self.model.torchrun_path):
                return False
        return True

    def _read_only_to_evaluate(self, site: CallSite) -> bool:
        """Every loop the run iterates the loader in sits in a function that never
        back-propagates (itself or through what it calls), in a run that back-propagates
        elsewhere: the loader feeds an evaluation (`encode_train_set(self.clftrainloader, net)`
        building a linear probe's features), where every rank reading the whole set repeats work
        but trains nothing. A loader read in no loop the model sees is still reported."""
        model = self.model
        if not any(c.method == "backward" for c in model.paths.sites()):
            return False
        loops = loops_over(model, site.node)
        for module, loop in loops:
            if loop.scope.kind != "function" or loop.scope.qualname in module.generators \
                    or id(loop.scope) in training_scopes(model, module):
                return False  # (a generator hands the batches on to what may train on them)
        for module in model.paths.modules():
            for call in module.calls:
                if call.dotted in ("iter", "next") and call.node.args \
                        and iterates(model, module, call.node.args[0].value, call.scope, site.node, call.point):
                    return False  # drawn batch by batch: followed no further
        return bool(loops)

    def _built_for_evaluation_only(self, site: CallSite) -> bool:
        """The loader is made in a builder that its training call never lets reach it: every call
        of the builder whose arguments leave the loader's branch open (`tag="val_x2"` past `if
        tag == "train":`, where the training loader gets its sampler) binds what it returns to
        an evaluation name (`val_loader_x2 = make_data_loader(..., tag="val_x2")`), and at least
        one other call's arguments close that branch."""
        model = self.model
        frames = [f for f in model.values.frames(site) if f is not None]
        if len(frames) < 2:
            return False
        live = [f for f in frames if model.paths.never(site, f) is None]
        if not live or len(live) == len(frames):
            return False
        for frame in live:
            call = frame.call
            names = call.module.assigned_names(call.node)
            if not names or not all(is_eval_name(n) and "train" not in n.lower() for n in names):
                return False
        return True

    def _known_names(self, site: CallSite) -> set[str]:
        """The names a loader goes by: those it is assigned to, the dict it is an entry of and the
        entry's key (`loaders = {"query": DataLoader(...)}`, `loaders["train"] = DataLoader(...)`), and, two
        calls deep, the parameters those are passed to and the names a caller binds them to when
        a function returns them (`train, test = self.build_dataset()`)."""
        module, scope = site.module, site.scope
        names = set(module.assigned_names(site.node))
        for name, values in scope.assignments.items():
            for v in values:
                if not isinstance(v, cst.Dict):
                    continue
                for e in v.elements:
                    if isinstance(e, cst.DictElement) and e.value is site.node:
                        names.add(name)
                        # The entry's key names the set too (`{"train": ..., "val": DataLoader(...)}`).
                        key = string_text(e.key)
                        if key:
                            names.add(key)
        for name, entries in scope.updates.items():
            for key, value, _, _ in entries:
                if value is site.node:
                    names.add(name)
                    if key:
                        names.add(key)
        names |= self._returned_to(site)
        found = set(names)
        seen: set[tuple[int, str]] = set()
        for name in names:
            self._handed_on(module, scope, name, 2, found, seen, site)
        return found

    def _returned_to(self, site: CallSite) -> set[str]:
        """The names the callers of a builder that returns the loader's call itself (`return
        DataLoader(...)`) bind it to, on the paths a distributed run takes: a call only the
        single-process branch makes (the `else` of `if cfg.is_use_DDP:`) names a loader that
        run never builds."""
        module, scope = site.module, site.scope
        function = scope.qualname if scope.kind == "function" else None
        if function is None or function not in module.functions \
                or not any(r is site.node for r in module.returns.get(function, [])):
            return set()
        paths = self.model.paths
        names: set[str] = set()
        for call, _bound in self.model.graph.callers(Function(module, function)):
            if paths.single_only(call) or paths.never(call) is not None or paths.dead(call):
                continue
            names.update(call.module.assigned_names(call.node))
        return names

    def _handed_on(self, module: ModuleModel, scope: Scope, name: str, depth: int, found: set[str],
                   seen: set[tuple[int, str]], site: CallSite | None = None) -> None:
        """`site`: the loader's call, when `scope` is its function: a caller whose arguments make
        a guard of it false (`build(cfg, tag="val")` and `if tag == "train":` around it) never
        gets this loader back, so the name it binds is not one of its names."""
        if depth <= 0 or "." in name or (id(scope), name) in seen:
            return
        seen.add((id(scope), name))
        graph = self.model.graph
        for call in module.calls:
            if call.scope is not scope:
                continue
            for arg in call.node.args:
                if not (isinstance(arg.value, cst.Name) and arg.value.value == name):
                    continue
                for callee, bound in graph.targets(call):
                    for values in callee.scope.assignments.values():
                        for param in values:
                            if isinstance(param, Param) \
                                    and graph.argument_for(call, callee, param, bound) is arg.value:
                                found.add(param.name)
                                self._handed_on(callee.module, callee.scope, param.name, depth - 1, found, seen)
        function = scope.qualname if scope.kind == "function" else None
        if function is None or function not in module.functions:
            return
        for returned in module.returns.get(function, []):
            if isinstance(returned, cst.Name) and returned.value == name:
                index: int | None = None
            elif isinstance(returned, cst.Tuple):
                where = [i for i, e in enumerate(returned.elements)
                         if isinstance(e.value, cst.Name) and e.value.value == name]
                if not where:
                    continue
                index = where[0]
            else:
                continue
            for call, bound in graph.callers(Function(module, function)):
                if site is not None and site.scope is scope and self.model.paths.never(
                        site, Frame(Function(module, function), call, None, bound)) is not None:
                    continue
                outer = call.scope
                for bound_name, bindings in outer.assignments.items():
                    for binding in bindings:
                        hit = binding is call.node if index is None else (
                            isinstance(binding, Item) and binding.value is call.node and binding.index == index)
                        if hit:
                            found.add(bound_name)
                            self._handed_on(call.module, outer, bound_name, depth - 1, found, seen)

    def _options_known(self, site: CallSite) -> bool:
        """Every `**options` of a call of torch's own DataLoader is a dict whose keys are all
        known (literals, merges, `update`s) and none of them passes a sampler (a subclass takes
        parameters of its own: `NeighborLoader(input_nodes=shard, **kwargs)`)."""
        if self.model.api(site) != api.DATALOADER:
            return False
        for a in site.node.args:
            if a.star != "**":
                continue
            keys = self.model.values.mapping_keys(site.module, a.value, site.scope, site.point)
            if keys is None or keys & {"sampler", "batch_sampler"}:
                return False
        return True

    def _narrowed(self, site: CallSite, dataset: cst.BaseExpression) -> bool:
        """The loader is built where `isinstance(dataset, IterableDataset)` holds (`if
        isinstance(ds, IterableDataset): DataLoader(ds)`, or after `if not isinstance(...):
        return ...`): builders that take a dataset from a registry pick the loader by its kind."""
        text = site.module.code(dataset)
        for guard in site.guards:
            test, negated = guard.test, guard.negated
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, negated = test.expression, not negated
            if negated or not isinstance(test, cst.Call) or dotted(test.func) != "isinstance":
                continue
            if len(test.args) != 2 or site.module.code(test.args[0].value) != text:
                continue
            kinds = test.args[1].value
            elements = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
            # `isinstance(ds, (IterableDataset, Other))` is not enough: every class must stream.
            if elements and all(self._iterable_class(site, e) for e in elements):
                return True
        return False

    def _iterable_class(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        name = dotted(expr)
        if name is None:
            return False
        target = self.model.resolver.name(site.module, name, site.scope)
        return target is not None and self.model.graph.is_subclass(target, api.ITERABLE_DATASET)

    def _same_on_every_rank(self, value: Value) -> bool:
        """A project IterableDataset the model reads whole that yields the same items on every
        rank: no code of its class chain, and no argument it is made with (nor what a name
        passed holds), mentions a rank, world size, shard, split, node or worker; and its bases
        are project classes and torch's IterableDataset only."""
        graph = self.model.graph
        found = graph.instance_of(value)
        if found is None or value.call is None:
            return False
        for module, info in graph.mro(*found):
            for base in graph.bases(module, info):
                if base.external is not None and api.canonical(base.external) != api.ITERABLE_DATASET:
                    return False
                if base.external is None and graph.class_at(base) is None:
                    return False
            if len(graph.bases(module, info)) != len(info.bases):
                return False  # a base the model cannot resolve
            if _SHARDS.search(code_only(module.code(info.node))):
                return False
            iterate = info.methods.get("__iter__")
            if iterate is not None and _iterates_what_it_is_given(module.functions[iterate], graph.mro(*found)):
                return False  # an object handed in (a tf.data pipeline, a file list) may be per rank
        for a in value.call.args:
            if _SHARDS.search(value.module.code(a.value)):
                return False
            for held in self.model.values.of(value.module, a.value, value.scope, value.frame, at=value.at):
                if isinstance(held.node, cst.CSTNode) and _SHARDS.search(held.module.code(held.node)):
                    return False
        return True

    def _own_share(self, value: Value) -> bool:
        """The dataset is the rank's own share, cut by hand before the loader (`tokens =
        tokens[rank * n:(rank + 1) * n]`, `files[rank::world_size]`), or a dataset made over one
        (`TensorDataset(tokens)`): each rank already reads only its part. Any value that reaches
        the loader counts: the single-process arm (`if rank is not None:` left) reads all."""
        model = self.model
        if is_own_share(model, value.module, value.node, value.scope):
            return True
        if value.call is None:
            return False
        for a in value.call.args:
            for held in model.values.of(value.module, a.value, value.scope, value.frame, at=value.at):
                if is_own_share(model, held.module, held.node, held.scope):
                    return True
        return False

    def _iterable(self, site: CallSite, dataset: cst.BaseExpression) -> bool:
        """The dataset shards itself: an IterableDataset (a torch one, a project subclass, or an
        outside class whose name says so), or a dataset made with the rank
        (`ImageDataset(files, shard=dist.get_rank(), num_shards=...)`)."""
        for value in self.model.values.at_call(site, dataset):
            if self._own_share(value):
                return True
            if value.call is None:
                continue
            resolve = self.model.resolver_for(value.module)
            for a in value.call.args:
                if any(isinstance(sub, (cst.Name, cst.Attribute, cst.Call)) and is_rank_value(sub, resolve)
                       for sub in subexpressions(a.value)):
                    return True
            if self.model.constructs(value, api.ITERABLE_DATASET):
                if self._same_on_every_rank(value):
                    self._stream = True
                    continue  # it yields everything on every rank: the loader does not shard
                return True
            if splits_by_rank(self.model, value, builder=value.scope is not site.scope):
                return True
            name = self.model.api_of(value) or ""
            if "Iterable" in name.rsplit(".", 1)[-1]:
                return True
        return False
