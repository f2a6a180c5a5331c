from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve, is_rank_value
from ddpcheck.lint.model.ddp import evens_nothing, is_ddp, is_eval_name, loops_over, sampler_values
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.module import CallSite, Item, ModuleModel, Scope
from ddpcheck.lint.model.paths import is_no_grad
from ddpcheck.lint.model.shares import SPLITTERS, assigned_expressions, indexed_by_rank, split_per_rank, strided_by_rank
from ddpcheck.lint.model.syntax import children, dotted, expressions, is_none, subexpressions
from ddpcheck.lint.model.world import WORLD_NAMES, is_world_value
from ddpcheck.lint.rule import Invalid, Rule
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.rules._classes import classes_of
from ddpcheck.lint.rules._forwards import DdpForwards

_WORLD = WORLD_NAMES
# What a sampler that evens the shards out writes: padding to a total size, a per-rank count.
_EVENS = ("total_size", "num_samples", "pad", "ceil", "[:")
_MAX_HOPS = 2
_RANGES = frozenset({"range", "np.arange", "numpy.arange", "torch.arange"})
# Hugging Face `datasets`' split of a dataset into one share per rank.
_SPLIT_BY_NODE = "datasets.distributed.split_dataset_by_node"


class UnevenInputs(Rule, DdpForwards):
    """Each rank gets its share of the data by a hand-made split (or a rank-sharded IterableDataset) that can leave ranks with different numbers of batches, and nothing evens them out.

    `files[rank::world_size]`, `np.array_split(samples, world_size)[rank]` and an
    `IterableDataset` whose `__iter__` keeps the items of its rank give the first `len % world`
    ranks one item more than the others. Unlike DistributedSampler, which pads or drops so that
    every rank has `ceil(len / world)` (or `floor`) samples, nothing equalises them.

    ## Why it matters
    DDP needs the same number of forward/backward passes on every rank: the gradient all-reduce
    of each backward waits for all of them. A rank with one batch fewer leaves the loop (to
    evaluate, save, or start the next epoch) while the others wait in the all-reduce of their
    extra batch: a hang until the process-group timeout, only for dataset sizes that do not
    divide evenly, so it appears after the dataset changes.

    Reported at the split (or in the class's `__iter__`: at the test that keeps the rank's items,
    `if i % self.num_replicas != self.rank: continue`, when one test names both, else at the `def`) when the file trains with it and contains
    no `join()` of DDP's (a string's or a path's `join` does not count) and no truncation to a multiple of the
    world size (a floor division by the world size that bounds a slice: `per = len(files) //
    world_size`, then `files[rank * per:(rank + 1) * per]`; not `torch.cuda.device_count() //
    local_world_size`). Where one strided split is seen to reach a loop that back-propagates,
    the strided splits beside it that do not (the validation items split the same way) are
    not reported, nor is one that reaches no such loop in a function that makes no backward
    (the validation keys an evaluation method splits among the ranks). A piece bound to local names that no back-propagating loop iterates (nor a loader
    built from it, nor a project function it is handed to, nor the caller it is returned to) is
    one batch: `obs = torch.chunk(obs, world_size)[rank]`, then one forward over all of it per
    optimizer step makes the same number of backward passes on every rank, and is not reported. A tensor method split (`idx.split(ceil(n / world_size))[rank]`, `.chunk`,
    `.tensor_split`) counts when a back-propagating loop iterates what it feeds (a loader built
    from it); the evaluation splits beside it are not reported. The same for a stride of indices,
    `idx = list(range(rank, n, world_size))` (or `np.arange` / `torch.arange` with those
    arguments), when the rows it picks reach a loop that back-propagates or makes collectives (in
    the same function, a project function they are passed to, or, through a loader a builder
    returns, where its callers use it: `return DataLoader(ds, sampler=SubsetRandomSampler(idx))`
    in a data module the script reaches counts when the script trains on the loader), and for a
    loop header `for i in range(rank, len(files), world_size):` whose body back-propagates or
    makes a collective. The world size is read by its value: `ws = dist.get_world_size()` or
    `world = int(os.environ["WORLD_SIZE"])` count, whatever the name. Hugging Face's
    `split_dataset_by_node(ds, rank=rank, world_size=world_size)` is such a split too (contiguous
    chunks one row apart in size, or, for a streaming set, whole files or every world-size-th
    example per rank), reported where it is called, in the script or a project module it
    reaches, when what it gives reaches a loop that back-propagates and that does not stop after
    a number of steps (`if update_step > args.num_training_steps: break` stops every rank at the
    same step while the stream lasts). Equal blocks that drop the
    remainder (`per = n // world_size; files[rank * per:(rank + 1) * per]`) are even. A training
    loader's project sampler whose `__iter__` keeps its rank's indices (`if idx % self.world_size
    != self.rank: continue`) and that never pads to a total size or counts samples per rank (nor
    loops forever) is reported where the sampler is made. So is a sampler written like
    DistributedSampler that sets its total to the dataset's own length (`self.total_size =
    len(self.dataset)`, an "evaluation sampler" that neither pads nor drops) when a loop over its
    loader, training or evaluation, back-propagates or makes a collective on every batch
    (`meter.update(loss).all_reduce()`).

    ## How to fix
    Use `DistributedSampler` for map-style data; for a hand split, truncate first
    (`n = len(files) // world_size * world_size; files = files[:n]`) or pad; for an
    `IterableDataset`, stop every rank after the same number of batches (computed from the
    smallest shard), or wrap the training loop in `with model.join():`.

    ## References
    - https://pytorch.org/tutorials/advanced/generic_join.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.join
    - https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset
    """

    code = "DDP034"
    known_only = True  # (a DDP forward counts as a collective when its network holds buffers)
    name = "uneven-inputs"
    severity = Severity.WARNING
    MESSAGE = (
        "`{split}` gives ranks different numbers of items when the total does not divide by the "
        "world size, and nothing evens them out: the rank with fewer batches leaves while the others "
        "wait in the all-reduce; truncate to a multiple of the world size, use DistributedSampler, "
        "or train under `model.join()`"
    )

    VALID = [
        """
        import torch.distributed as dist
        world_size, rank = dist.get_world_size(), dist.get_rank()
        n = len(files) // world_size * world_size
        shard = files[:n][rank::world_size]
        for path in shard:
            loss = model(load(path)).sum()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch.distributed as dist
        shard = files[dist.get_rank()::dist.get_world_size()]
        with model.join():
            for path in shard:
                model(load(path)).sum().backward()
                optimizer.step()
        """,
    ]
    INVALID = [
        Invalid(
            """
            import glob
            import torch.distributed as dist
            from torch.utils.data import DataLoader

            dist.init_process_group("nccl")
            rank, world_size = dist.get_rank(), dist.get_world_size()
            files = sorted(glob.glob("shards/*.tar"))
            my_files = files[rank::world_size]
            loader = DataLoader(ShardDataset(my_files), batch_size=32)
            for batch in loader:
                model(batch).loss.backward()
                optimizer.step()
            """,
            lines=(8,),
        ),
        Invalid(
            """
            import torch.distributed as dist
            from torch.utils.data import DataLoader, IterableDataset

            class LineStream(IterableDataset):
                def __init__(self, path):
                    self.path = path

                def __iter__(self):
                    rank, world = dist.get_rank(), dist.get_world_size()
                    with open(self.path) as f:
                        for i, line in enumerate(f):
                            if i % world == rank:
                                yield encode(line)

            loader = DataLoader(LineStream("train.txt"), batch_size=64)
            for batch in loader:
                model(batch).backward()
            """,
            lines=(8,),
        ),
        Invalid(
            """
            from math import ceil

            import torch.distributed as dist
            import torch.nn.functional as F
            from torch_geometric.loader import NeighborLoader

            def run(rank, world_size, data, model, optimizer):
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
                train_idx = data.train_mask.nonzero(as_tuple=False).view(-1)
                train_idx = train_idx.split(ceil(train_idx.size(0) / world_size))[rank]
                val_idx = data.val_mask.nonzero(as_tuple=False).view(-1)
                val_idx = val_idx.split(ceil(val_idx.size(0) / world_size))[rank]
                train_loader = NeighborLoader(data, input_nodes=train_idx, num_neighbors=[25, 10],
                                              batch_size=1024, shuffle=True, drop_last=True)
                val_loader = NeighborLoader(data, input_nodes=val_idx, num_neighbors=[25, 10], batch_size=1024)
                for epoch in range(1, 21):
                    model.train()
                    for batch in train_loader:
                        optimizer.zero_grad()
                        out = model(batch.x, batch.edge_index)[:batch.batch_size]
                        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                        optimizer.step()
                    model.eval()
                    for batch in val_loader:
                        model(batch.x, batch.edge_index)
            """,
            lines=(10,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        root = model.root
        source = root.source
        if self._joins():
            return  # DDP's join evens the inputs out
        self._samplers_evening_nothing()
        if _truncates(source):
            return  # a truncation to a multiple of the world size
        resolve = model.resolver_for(root)
        reported: set[int] = set()
        self._strided_loop_headers(resolve, reported)
        if not any(c.method == "backward" for c in root.calls):
            return
        self._reached_strides(reported)
        self._node_splits()
        strided: list[tuple[cst.Subscript, bool, bool]] = []
        for scope, node in assigned_expressions(root):
            for sub in expressions(node):  # (subscripts and calls: the tokens are not read)
                if isinstance(sub, cst.Subscript) and strided_by_rank(sub, resolve, scope):
                    strided.append((sub, self._feeds_training(root, scope, set(root.assigned_names(node)), 0),
                                    self._backward_in(root, scope)))
                elif isinstance(sub, cst.Call) and _range_by_rank(sub, resolve, scope) and id(sub) not in reported \
                        and self._feeds_training(root, scope, set(root.assigned_names(node)), 0):
                    # `idx = list(range(rank, n, world_size))`, then the rows it picks are trained on
                    reported.add(id(sub))
                    self.report(sub, self.MESSAGE.format(split=model.text_of(root, sub)))
                elif isinstance(sub, cst.Subscript) and isinstance(sub.value, cst.Call) and indexed_by_rank(sub, resolve):
                    site = root.call_at(sub.value)
                    if site is None:
                        continue
                    if model.api(site) in SPLITTERS and not self._whole_batch(root, scope, node) or (
                            split_per_rank(site) and sub is node and self._trains_with(scope, root.assigned_names(node))):
                        self.report(sub, self.MESSAGE.format(split=model.text_of(root, sub)))
        # `files[rank::world_size]`: where one of the script's strided splits is seen to reach
        # training, the splits beside it that are not (the validation shots split the same
        # way, iterated without a backward) are evaluation splits; otherwise each is reported.
        # A split that reaches no training loop in a function that makes no backward (the
        # validation keys of an evaluation method) is not judged either.
        training = any(feeds for _, feeds, _ in strided)
        for sub, feeds, steps in strided:
            if feeds or not training and steps:
                self.report(sub, self.MESSAGE.format(split=model.text_of(root, sub)))
        for site in root.calls:
            if model.api(site) != api.DATALOADER:
                continue
            dataset = site.arg("dataset", 0)
            if dataset is None:
                continue
            for module, info in classes_of(model, model.values.at_call(site, dataset)):
                if not any(model.graph.is_subclass(base, api.ITERABLE_DATASET)
                           for owner_module, owner in model.graph.mro(module, info)
                           for base in model.graph.bases(owner_module, owner)):
                    continue
                iterate = info.methods.get("__iter__")
                if iterate is None:
                    continue
                function = module.functions[iterate]
                text = module.code(function)
                if any(w in text for w in _WORLD) and ("rank" in text):
                    self.report(_rank_filter(module, function) or function.name,
                                self.MESSAGE.format(split=f"{info.qualname}.__iter__"), module=module)
        self._rank_filtering_samplers()

    def _strided_loop_headers(self, resolve: Resolve, reported: set[int]) -> None:
        """`for i in range(rank, len(files), world_size):` around a backward or a collective:
        the first `len % world_size` ranks run the body once more. The script need not
        back-propagate itself (an evaluation in the script, the training step in a model class)."""
        root = self.model.root
        for loop in root.fors:
            for sub in expressions(loop.node.iter):
                if isinstance(sub, cst.Call) and id(sub) not in reported \
                        and _range_by_rank(sub, resolve, loop.scope) and self._works_in(root, loop.node):
                    reported.add(id(sub))
                    self.report(sub, self.MESSAGE.format(split=self.model.text_of(root, sub)))

    def _backward_in(self, module: ModuleModel, scope: Scope) -> bool:
        """A backward in the scope itself or in a function it calls (module level: anywhere in
        the module)."""
        model = self.model
        calls = module.calls if scope.kind == "module" else module.calls_in(scope.qualname)
        return any(c.method == "backward" or model.facts.does(c, "backward") for c in calls)

    def _reached_strides(self, reported: set[int]) -> None:
        """`idx = np.arange(rank, len(ds), world_size)` in a project module the script reaches
        (a data module's loader builder), when the rows it picks reach a loop that
        back-propagates or makes collectives (followed through the loader the builder returns)."""
        model = self.model
        for module in model.paths.modules():
            source = module.source
            if module is model.root or _truncates(source):
                continue  # the script is read below; a module that truncates evens its shares
            resolve = model.resolver_for(module)
            for scope, node in assigned_expressions(module):
                for sub in expressions(node):
                    if isinstance(sub, cst.Call) and id(sub) not in reported and _range_by_rank(sub, resolve, scope) \
                            and self._feeds_training(module, scope, set(module.assigned_names(node)), 0):
                        reported.add(id(sub))
                        self.report(sub, self.MESSAGE.format(split=model.text_of(module, sub)), module=module)

    def _node_splits(self) -> None:
        """`ds = split_dataset_by_node(ds, rank=rank, world_size=world_size)` (Hugging Face
        `datasets`), in the script or a project module it reaches, when what it gives reaches a
        loop that back-propagates: a map-style set is cut into contiguous chunks whose sizes
        differ by one, a streaming one gets whole files per rank (when their number divides by
        the world size) or every world-size-th example, so the ranks run different numbers of
        batches."""
        model = self.model
        for module in model.paths.modules():
            source = module.source
            if "split_dataset_by_node" not in source \
                    or "//" in source and any(w in source for w in _WORLD) and "[:" in source:
                continue  # a module that truncates evens its shares
            for site in module.calls:
                if model.api(site) != _SPLIT_BY_NODE or model.paths.never(site) is not None:
                    continue
                names = set(module.assigned_names(site.node))
                if names and not any("." in n for n in names) \
                        and self._feeds_training(module, site.scope, names, 0, uncapped=True):
                    self.report(site.node, self.MESSAGE.format(split=model.text_of(module, site.node)),
                                module=module)

    def _rank_filtering_samplers(self) -> None:
        """A training loader whose sampler is a project Sampler that keeps the indices of its
        rank in `__iter__` (`if idx % self.world_size != self.rank: continue`) and never evens
        the shards out (no padding to a total size, no per-rank sample count; an endless
        `while True:` sampler never runs out): reported where the sampler is made."""
        model = self.model
        root = model.root
        for site in root.calls:
            if not model.makes(site, api.DATALOADER) or any(is_eval_name(n) for n in root.assigned_names(site.node)):
                continue
            for keyword, position in (("sampler", 3), ("batch_sampler", 4)):
                for value in model.values.keyword(site, keyword, position):
                    if value.call is None or value.module is not root \
                            or any(is_eval_name(n) for n in root.assigned_names(value.call)):
                        continue
                    for module, info in classes_of(model, [value]):
                        chain = model.graph.mro(module, info)
                        if not any(model.graph.is_subclass(base, api.SAMPLER)
                                   for owner_module, owner in chain for base in model.graph.bases(owner_module, owner)):
                            continue
                        iterate = next(((m, c.methods["__iter__"]) for m, c in chain if "__iter__" in c.methods), None)
                        if iterate is None:
                            continue
                        text = code_only(iterate[0].code(iterate[0].functions[iterate[1]]))
                        whole = "".join(code_only(m.code(c.node)) for m, c in chain)
                        if "rank" in text and any(w in text for w in _WORLD) and "%" in text \
                                and "while True" not in text and not any(w in whole for w in _EVENS):
                            self.report(value.call, self.MESSAGE.format(split=f"{info.qualname}.__iter__"),
                                        module=root)

    def _samplers_evening_nothing(self) -> None:
        """A loader whose sampler neither pads nor drops (a DistributedSampler subclass that sets
        `self.total_size = len(self.dataset)`), iterated by a loop that back-propagates or makes
        a collective on every batch (`meter.update(loss).all_reduce()` in a validation loop):
        the ranks with one batch fewer leave the loop while the others wait in the collective.
        Reported where the sampler is made."""
        model = self.model
        reported: set[int] = set()
        for site in model.paths.sites():
            if not model.makes(site, api.DATALOADER) or model.paths.never(site) is not None:
                continue
            values, _ = sampler_values(model, site)
            for value in values:
                made = value.module.call_at(value.call) if value.call is not None else None
                if made is None or id(made.node) in reported or not evens_nothing(model, made):
                    continue
                if any(self._works_in(module, loop.node) for module, loop in loops_over(model, site.node)):
                    reported.add(id(made.node))
                    self.report(made.node, self.MESSAGE.format(split=model.text_of(made.module, made.node)),
                                module=made.module)

    def _whole_batch(self, module: ModuleModel, scope: Scope, node: cst.BaseExpression) -> bool:
        """The rank's piece is bound to local names only, none of which (nor anything built from
        them) is iterated by a loop that back-propagates, passed to a project function that does,
        or returned: the rank uses its piece as one batch (`obs = torch.chunk(obs, world_size)[rank]`,
        then `loss_fn(model(src), obs).backward()` once per step), so every rank makes the same
        number of backward passes whatever the sizes of the pieces."""
        names = module.assigned_names(node)
        if not names or any("." in name for name in names):
            return False  # an attribute (`self.files = ...`) is read by methods we do not follow here
        if scope.kind == "function" and any(_carries(v, set(names)) for v in module.returns.get(scope.qualname, ())):
            return False
        return not self._feeds_training(module, scope, set(names), 0)

    def _trains_with(self, scope: Scope, names: list[str]) -> bool:
        """Whether a loop of `scope` that back-propagates iterates one of `names` or what a call
        builds from them (`loader = NeighborLoader(input_nodes=train_idx)`): the split feeds
        training, not an evaluation without collectives."""
        model = self.model
        root = model.root
        reached = set(names)
        for site in root.calls:
            if site.scope is scope and any(_mentions(arg.value, reached) for arg in site.node.args):
                reached.update(root.assigned_names(site.node))
        for loop in root.fors:
            if loop.scope is not scope or not _mentions(loop.node.iter, reached):
                continue
            if any(loop.node in c.loops and (c.method == "backward" or model.facts.does(c, "backward"))
                   for c in root.calls):
                return True
        return False


    def _joins(self) -> bool:
        """The file evens inputs out with DDP's `join()` (`with model.join():`, the generic
        `Join([...])` context manager) — not a string's or a path's `join`."""
        model = self.model
        for site in model.root.calls:
            name = model.api(site) or ""
            if name.startswith("torch.distributed.algorithms") and name.endswith("Join"):
                return True
            func = site.node.func
            if site.method != "join" or not isinstance(func, cst.Attribute):
                continue
            receiver = func.value
            if isinstance(receiver, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)) \
                    or (dotted(receiver) or "").endswith("path"):
                continue  # `"|".join(names)`, `os.path.join(...)`
            if name.startswith(("os.", "posixpath.", "ntpath.", "shlex.", "str.", "threading.", "multiprocessing.")):
                continue  # the path's join however imported (`import os.path as osp`), a thread's
            values = model.values.at_call(site, receiver)
            known = bool(values) and all(isinstance(v.node, (cst.Call, cst.SimpleString, cst.FormattedString,
                                                               cst.ConcatenatedString)) or is_none(v.node)
                                         for v in values)  # `thread = None` before `thread = Thread(...)`
            if not known or any(is_ddp(model, v) for v in values):
                return True  # DDP's join, or a receiver we cannot read: not known to be uneven
        return False

    def _works_in(self, module: ModuleModel, loop: cst.CSTNode) -> bool:
        """A call inside `loop` back-propagates or makes a collective (directly or in a helper),
        the forward of a DDP model among them, called with gradients on (it broadcasts the
        network's buffers each time: an evaluation of each rank's share through the wrapper,
        `model.infer(seq)`; with gradients off only the first forward after training does)."""
        facts = self.model.facts
        inside = [c for c in module.calls if loop in c.loops]
        return any(c.method == "backward" or facts.does(c, "backward") or facts.does(c, "collective")
                   for c in inside) or any(self.forwards_ddp(c) for c in inside
                                           if not is_no_grad(self.model, c.module, c.withs, c.scope.qualname))

    def _feeds_training(self, module: ModuleModel, scope: Scope, names: set[str], depth: int, ups: int = 0,
                        uncapped: bool = False) -> bool:
        """Whether what `names` hold reaches a loop that back-propagates: iterated there, or
        through values built from them in `scope` (`df = df.iloc[idx]`, `loader = Loader(df)`),
        or passed to a project function that does so with its parameter. With `uncapped`, a
        loop that breaks on a count (`if update_step > args.num_training_steps: break`) does not
        count: every rank stops after the same number of steps."""
        reached = set(names)
        grew = True
        while grew:
            grew = False
            for name, values in scope.assignments.items():
                if name not in reached and any(isinstance(v, cst.BaseExpression) and _carries(v, reached)
                                               for v in values):
                    reached.add(name)
                    grew = True
        for loop in module.fors:
            if loop.scope is scope and _mentions(loop.node.iter, reached) and self._works_in(module, loop.node) \
                    and not (uncapped and _breaks_on_count(loop.node)):
                return True
        graph = self.model.graph
        for site in module.calls:
            if depth >= _MAX_HOPS:
                break
            if site.scope is not scope or not any(_carries(a.value, reached) for a in site.node.args):
                continue
            for function, bound in graph.targets(site):
                params = {p.name for p in function.params()
                          if _passes(graph.argument_for(site, function, p, bound), reached)}
                if params and self._feeds_training(function.module, function.scope, params, depth + 1, ups, uncapped):
                    return True
        # Returned to the callers (`return DataLoader(ds, sampler=SubsetRandomSampler(idx))` from
        # a data module's builder): followed where each caller binds the result.
        # (Up to two callers up, not counted as hops down: the builder's caller hands the loader on.)
        if ups < 2 and scope.kind == "function" \
                and any(_carries(v, reached) for v in module.returns.get(scope.qualname, ())):
            for call, _ in graph.callers(Function(module, scope.qualname)):
                taken = set(call.module.assigned_names(call.node)) | {
                    name for name, values in call.scope.assignments.items()
                    if any(isinstance(v, Item) and v.value is call.node for v in values)}
                if taken and self._feeds_training(call.module, call.scope, taken, depth, ups + 1, uncapped):
                    return True
        return False


def _breaks_on_count(loop: cst.CSTNode) -> bool:
    """The loop leaves under a comparison of its own (`if update_step > max_steps: break`), not
    one of a loop nested in it: it stops after a number of steps, not when the data ends."""
    stack: list[cst.CSTNode] = list(children(loop))
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.If) and isinstance(node.test, cst.Comparison) and any(
                isinstance(n, cst.Break) for n in subexpressions(node.body)):
            return True
        stack.extend(children(node))
    return False


def _rank_filter(module: ModuleModel, function: cst.FunctionDef) -> cst.BaseExpression | None:
    """The test in `__iter__` that keeps the items of the rank (`if i % self.num_replicas !=
    self.rank: continue`): where the shares are made uneven, reported there rather than at the
    `def`. None when no single test names both the rank and the world size."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.If):
            text = code_only(module.code(node.test))
            if "rank" in text and any(w in text for w in _WORLD) and "%" in text:
                return node.test
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(reversed(children(node)))
    return None


def _passes(arg: cst.BaseExpression | CallSite | None, names: set[str]) -> bool:
    return isinstance(arg, cst.BaseExpression) and _carries(arg, names)


def _carries(expr: cst.BaseExpression, names: set[str]) -> bool:
    """`expr` carries the rows one of `names` selects: it mentions the name other than to take
    one element of it (`full_data[:int(val_index[0])]` uses a boundary, not the rank's rows)."""
    elements = {id(sub.value) for sub in subexpressions(expr)
                if isinstance(sub, cst.Subscript) and all(isinstance(e.slice, cst.Index) for e in sub.slice)}
    return any(isinstance(sub, cst.Name) and sub.value in names and id(sub) not in elements
               for sub in subexpressions(expr))


def _truncates(source: str) -> bool:
    """The text cuts the data to a multiple of the world size: a floor division by the world
    size that bounds a slice, in the slice itself (`idx[: usable // world]`) or through the name
    it is bound to (`per = len(files) // world`, then `files[rank * per:(rank + 1) * per]`), or
    through a name that bounds an index test (`last = len(keys) // world - 1`, then `if i < last:
    dist.barrier()`: collectives only up to the count every rank reaches). A
    quotient used elsewhere (`n_gpus = torch.cuda.device_count() // local_world_size`, a batch
    size per rank) cuts nothing."""
    if "//" not in source or "[" not in source or not any(w in source for w in (*_WORLD, "world", "World")):
        return False
    world = "|".join(re.escape(w) for w in (*_WORLD, "world", "World"))
    division = rf"//[^\n#]*(?:{world})"
    if re.search(rf"\[[^\]\n]*(?::[^\]\n]*{division}|{division}[^\]\n]*:)", source):
        return True
    for bound in re.finditer(rf"^[ \t]*(\w+)\s*=[^\n#]*{division}", source, re.MULTILINE):
        name = re.escape(bound.group(1))
        if re.search(rf"\[[^\]\n]*(?::[^\]\n]*\b{name}\b|\b{name}\b[^\]\n]*:)", source):
            return True
        # `last = len(keys) // world - 1`, then `if i < last: dist.barrier()`: the collectives
        # stop at the count every rank reaches, which evens the shares out by hand.
        if re.search(rf"\bif\b[^\n#]*(?:<=?\s*{name}\b|\b{name}\s*>=?)", source):
            return True
    return False


def _range_by_rank(call: cst.Call, resolve: Resolve, scope: Scope) -> bool:
    """`range(rank, n, world_size)` (or numpy's and torch's `arange`): every world-size-th index
    from the rank's own; not when the stop is cut to a multiple of the world size (`n //
    world_size * world_size`), which gives every rank the same count."""
    if dotted(call.func) not in _RANGES or len(call.args) != 3 or any(a.keyword or a.star for a in call.args):
        return False
    if any(isinstance(sub, cst.BinaryOperation) and isinstance(sub.operator, cst.FloorDivide)
           and is_world_value(sub.right, scope, resolve) for sub in subexpressions(call.args[1].value)):
        return False
    return is_rank_value(call.args[0].value, resolve) and is_world_value(call.args[2].value, scope, resolve)


def _mentions(expr: cst.BaseExpression, names: set[str]) -> bool:
    return any(isinstance(sub, cst.Name) and sub.value in names for sub in subexpressions(expr))
