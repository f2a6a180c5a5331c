from __future__ import annotations

import re
from typing import cast

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.alternatives import bound_name, one_per_value
from ddpcheck.lint.model.conditions import exclusive_arms, is_rank_value
from ddpcheck.lint.model.ddp import per_rank_or_memory
from ddpcheck.lint.model.module import CallSite, ModuleModel
from ddpcheck.lint.model.syntax import dotted, string_text, subexpressions
from ddpcheck.lint.rule import Invalid, Replace, Rule

# Names of objects whose state dict holds no tensors: learning-rate schedulers, grad scalers.
_TENSORLESS_OWNER = re.compile(r"(^|_)(lr_)?sched(uler)?s?$|(^|_)(grad_|amp_)?scaler$", re.I)

# What a loader of data is built from: the loaded object is data, not a checkpoint.
_DATA_CLASSES = (api.DATALOADER, api.DATASET)

# torch's own datasets built from what they are handed (`Subset(train_set, torch.load(idx))`:
# the loaded object is the indices or the tensors of the data).
_TORCH_DATASETS = frozenset(f"torch.utils.data{m}.{name}" for m in ("", ".dataset")
                            for name in ("Subset", "TensorDataset", "ConcatDataset", "StackDataset"))

# Paths that name cached data rather than a checkpoint: tensors saved from the CPU (also a table
# of precomputed embeddings, `description_embeddings.pt`, as features are).
_DATA_WORDS = re.compile(r"cache|feature|token|vocab|dataset|examples|corpus|embeddings", re.I)


class LoadWithoutMapLocation(Rule):
    """`torch.load` without `map_location` in a DDP script: every rank loads the tensors onto GPU 0.

    ## Why it matters
    `torch.load` restores each tensor onto the device it was saved from. A checkpoint written by
    rank 0 of a GPU job holds `cuda:0` tensors, so every rank that loads it allocates a full copy
    on GPU 0 before anything is moved. Users see GPU 0 with N times the expected memory in
    `nvidia-smi`, `CUDA out of memory` on GPU 0 only when resuming, and a CUDA context of every
    rank on GPU 0.

    Reported for `torch.load(...)` with neither `map_location=` nor a second positional argument
    (and no `**kwargs`), in a file that uses DDP — in the run's own code, or in the constructor
    of a project network the run builds on every rank (`self.backbone.load_state_dict(
    torch.load(weights))` in `__init__`, in a method `__init__` calls on self, or in a network
    it builds there) —, unless the load runs on rank 0 only or only in a
    non-distributed run (`if not args.distributed:`), or when the path names cached data rather than
    a checkpoint (`cached_features.pt`, `tokens_cache`, `text_embeddings.pt`), which is saved from the CPU, or when the
    load reads one of many files per pass of a loop (`for path in shard_files: torch.load(path)`,
    `files[i]` in `for i in order:`: data read in shards) and nothing in that loop restores a
    state dict (`load_state_dict`: an ensemble of checkpoints is reported), or when what
    is loaded is handed to a `DataLoader`, a `Dataset` (torch's own too: the indices of
    `Subset(train_set, torch.load(idx_file))`), or a project function that builds one
    (`graphs = torch.load(shard)` then `make_loader(graphs, batch, rank)`) and never to a
    `load_state_dict`: preprocessed data, not a checkpoint; nor a load that reads back what the
    same function otherwise computes and saves under the same name (`if os.path.exists(pkl):
    emb = torch.load(f)` / `else: emb = embed(loader); torch.save(emb, f)`): a cache of outputs.
    Also not
    reported: a file named per rank (each rank reloads what it saved), a loader `load_<x>` whose
    `save_<x>` beside it moves the tensors to the CPU before saving, a load under a condition no
    run takes (the ImageNet example's `if args.gpu is None:` resume where the caller always sets
    `args.gpu = dist.get_rank()` before `main_worker(args)`), a load in a method of a plain class of the script that nothing calls (its only
    call commented out, `# fitter.load(path)`; a method called by name, through `getattr`, of a
    class with bases, or of a script another module imports may run), a load in the launching process before it `mp.spawn`s the workers, beside the spawn or in a function
    only that block calls (`if mode == "train": mp.spawn(...)` / `else: test()`; in a script no
    outside launcher starts), and runs that pin each process to one GPU with
    `CUDA_VISIBLE_DEVICES` (`cuda:0` is then every process's own GPU; not so where the launcher
    sets it before it starts the workers, `--gpu 0,1` listing the GPUs they share), nor a load handed straight
    to the `load_state_dict` of a learning-rate scheduler or a `GradScaler`
    (`scheduler.load_state_dict(torch.load(path))`, the receiver built by
    `torch.optim.lr_scheduler` or named `scheduler`/`lr_sched`/`scaler`): their state dicts hold
    Python numbers only (step counts, base rates, the scale as a float), so nothing lands on a GPU.
    One checkpoint loaded one way or another in the arms of one `if` chain (`if cfg.HORIZON == 1:
    state = torch.load(w1)` / `elif ...: state = torch.load(w6)`, each bound to the same name) is
    reported once: in the arm the command line's defaults take (`else` of `if args.use_fsdp:`),
    else the first.

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
        """
        # Each process is pinned to its GPU through CUDA_VISIBLE_DEVICES: cuda:0 is its own.
        import os
        import torch
        import torch.distributed as dist

        def main_worker(gpu, args):
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
            dist.init_process_group("nccl", rank=gpu, world_size=args.world_size)
            state = torch.load(args.checkpoint)
        """,
        """
        # The class writes CPU tensors, so what its loader reads back lands on the CPU; the
        # optional TensorRT path is never taken (no caller passes trt_file).
        import torch
        import torch.distributed as dist

        class ModelBase:
            def save_network(self, network, path):
                state_dict = network.state_dict()
                for key, param in state_dict.items():
                    state_dict[key] = param.cpu()
                torch.save(state_dict, path)

            def load_network(self, path, network):
                network.load_state_dict(torch.load(path))

        def evaluate(model, loader, trt_file=None):
            if trt_file is not None:
                model.load_state_dict(torch.load(trt_file))
            return [model(x) for x in loader]

        def main():
            dist.init_process_group("nccl")
            base = ModelBase()
            base.load_network(args.pretrained, net)
            evaluate(net, val_loader)

        if __name__ == "__main__":
            main()
        """,
        """
        # Loaded once in the launching process, before mp.spawn starts the workers.
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp

        def run(rank, world_size, graph):
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            train(graph, rank)

        if __name__ == "__main__":
            graph = torch.load("graph.pt")
            mp.spawn(run, args=(4, graph), nprocs=4)
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
        Invalid(
            """
            # The training-state saver keeps the GPU tensors: its loader needs map_location.
            import os
            import torch
            import torch.distributed as dist

            class Model:
                def save_training_state(self, path):
                    torch.save({"model": self.net.state_dict(), "step": self.step}, path)

                def load_training_state(self, path):
                    state = torch.load(path)
                    self.net.load_state_dict(state["model"])

            def main():
                os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
                dist.init_process_group("nccl")
                Model().load_training_state(args.resume)

            if __name__ == "__main__":
                main()
            """,
            lines=(11,),
        ),
    ]

    NO_MATCH_MESSAGE = (
        "`map_location` maps only the bare key \"cuda\", which no saved storage carries (they are "
        "tagged \"cuda:0\"...): tensors return to the GPU they were saved from on every rank; pass "
        "`map_location=\"cpu\"` or `map_location=f\"cuda:{local_rank}\"`"
    )

    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        pinned: bool | None = None
        built = self._network_loads()
        found: list[CallSite] = []
        for site in [*model.paths.sites(), *built]:
            if model.api(site) != api.LOAD or site.has_star_kwargs:
                continue
            given = site.arg("map_location", 1)
            if given is not None and not _matches_no_device(given):
                continue
            paths = model.paths
            if paths.main_only(site) or paths.single_only(site) or paths.never(site) or paths.dead(site):
                continue
            if self._cached_data(site) or self._one_file_per_pass(site) \
                    or per_rank_or_memory(model, site, site.arg("f", 0), memory=False):
                continue  # cached data, or a file this rank saved from its own GPU
            if self._saved_from_cpu(site) or self._in_the_launcher(site) or self._tensorless_state(site):
                continue
            if self._used_as_data(site) or self._memoized(site):
                continue
            if pinned is None:
                pinned = self._one_gpu_per_process()
            if pinned:
                return  # every process sees its own GPU as cuda:0
            found.append(site)
        # One checkpoint loaded one way or another in the arms of one `if` chain is one load.
        for site in one_per_value(found):
            related = built[site] if site in built else model.paths.chain(site)
            if site.arg("map_location", 1) is not None:
                self.report(site.node, self.NO_MATCH_MESSAGE, module=site.module, related=related)
                continue
            fix = _add_map_location(site.node) if site.module is model.root else None
            self.report(site.node, fix=fix, module=site.module, related=related)

    def _network_loads(self, depth: int = 2) -> dict[CallSite, list[CallSite]]:
        """The `torch.load` calls a project network makes while it is built on every rank of
        the run (`self.backbone.load_state_dict(torch.load(ckpt))` in its `__init__`, in a
        method `__init__` calls on self, or in the constructor of a network it builds there),
        with the calls that lead there. The run's reach skips building networks, so these are
        looked for here; a module whose text never loads is not read."""
        model = self.model
        graph = model.graph
        out: dict[CallSite, list[CallSite]] = {}
        todo: list[tuple[CallSite, list[CallSite], int]] = [
            (s, [*model.paths.chain(s), s], depth) for s in model.paths.sites()
            if s.target is not None and s.target.kind == "class" and s.target.external is None
            and s.target.path is not None and model.paths.ranks(s) == "every"]
        seen: set[tuple[int, str]] = set()
        while todo:
            site, chain, left = todo.pop(0)
            target = site.target
            assert target is not None and target.path is not None
            text = model.project.text(target.path)
            if not text or "load" not in text or not graph.is_subclass(target, api.MODULE_BASE):
                continue
            found = graph.class_at(target)
            init = graph.method(*found, "__init__") if found is not None else None
            if init is None or (id(init.module), init.qualname) in seen:
                continue
            seen.add((id(init.module), init.qualname))
            bodies = [(init, chain)]
            for call in init.module.calls_in(init.qualname):
                func = call.node.func
                if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                    bodies += [(f, [*chain, call]) for f, _ in graph.targets(call) if f.module is init.module]
                elif left > 1 and call.target is not None and call.target.kind == "class" \
                        and call.target.external is None and call.target.path is not None:
                    todo.append((call, [*chain, call], left - 1))
            for function, path in bodies:
                for call in function.module.calls_in(function.qualname):
                    if model.api(call) == api.LOAD and model.paths.restricted(call) is None:
                        out.setdefault(call, path)
        return out

    def _one_gpu_per_process(self) -> bool:
        """The run sets `CUDA_VISIBLE_DEVICES` to one device per process
        (`os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)`): `cuda:0` is each process's own
        GPU, so tensors saved from `cuda:0` come back where they belong."""
        model = self.model
        root = model.root
        scopes = [(root, s) for s in (root.module_scope, *root.function_scopes.values())]
        scopes += [(f.module, f.scope) for f in model.paths.reached()]
        for module, scope in scopes:
            resolve = model.resolver_for(module, scope)
            for key, value, _, point in scope.updates.get("os.environ", ()):
                if key != "CUDA_VISIBLE_DEVICES":
                    continue
                if self._starts_workers_after(module, scope.qualname, point.tick):
                    continue  # the launcher lists the GPUs its workers share (`--gpu 0,1`)
                text = string_text(value)
                if text is not None and text.strip().isdigit():
                    return True
                if any(isinstance(sub, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and is_rank_value(sub, resolve)
                       for sub in subexpressions(value)):
                    return True  # `str(args.gpu)`, `str(local_rank)`
        return False

    def _starts_workers_after(self, module: ModuleModel, qualname: str, tick: int) -> bool:
        """The body `qualname` goes on to start the worker processes after `tick`
        (`mp.spawn(...)`, or a project function that calls it: `launch_processes(args, cfg)`):
        what it put in `CUDA_VISIBLE_DEVICES` is the set of GPUs all its workers share."""
        model = self.model
        for call in module.calls_in(qualname):
            if call.tick <= tick:
                continue
            if model.api(call) in api.PROCESS_STARTERS:
                return True
            for function, _ in model.graph.targets(call):
                if any(model.api(inner) in api.PROCESS_STARTERS
                       for inner in function.module.calls_in(function.qualname)):
                    return True
        return False

    def _saved_from_cpu(self, site: CallSite) -> bool:
        """The file is one the project writes from CPU tensors: the load sits in `load_<x>` and
        the `save_<x>` beside it (same class or module) moves every tensor to the CPU before
        `torch.save` (`state_dict[key] = param.cpu()`)."""
        function = site.scope.function
        if function is None or not function.name.startswith("load"):
            return False
        sibling = f"save{function.name[len('load'):]}"
        owner = function.parent
        qualname = f"{owner.qualname}.{sibling}" if owner is not None and owner.kind == "class" else sibling
        module = site.module
        scope = module.function_scopes.get(qualname)
        if scope is None:
            return False
        for save in module.calls_in(qualname):
            obj = save.arg("obj", 0)
            if self.model.api(save) != api.SAVE or obj is None:
                continue
            held: list[cst.CSTNode] = [obj]
            name = dotted(obj)
            if name is not None:
                held += [v for v in scope.assignments.get(name, ()) if isinstance(v, cst.CSTNode)]
                held += [v for _, v, _, _ in scope.updates.get(name, ())]
            if any(_to_cpu(node) for node in held):
                return True
        return False

    def _in_the_launcher(self, site: CallSite) -> bool:
        """The load runs in the process that starts the workers, before it starts them
        (`dataset = Reddit(root)` then `mp.spawn(run, args=(dataset,))` under `__main__`), or
        beside the start in its block and in the functions only that block calls (`if mode ==
        "train": mp.spawn(train, ...)` / `else: test()`), in a script no outside launcher
        starts: once, not on every rank."""
        model = self.model
        if model.torchrun_path:
            return False  # under torchrun every rank runs that code too
        if model.paths.launcher_only(site):
            return True
        chain = model.paths.chain(site)
        first = chain[0] if chain else site
        if first.module is not model.root:
            return False
        return any(
            other.index > first.index and model.api(other) in api.PROCESS_STARTERS
            for other in model.root.calls_in(first.scope.qualname)
        )

    def _tensorless_state(self, site: CallSite) -> bool:
        """The load goes straight into the `load_state_dict` of a learning-rate scheduler or a
        GradScaler (`scheduler.load_state_dict(torch.load(path))`): their state dicts hold Python
        numbers only (base rates, step counters, the scale as a float), so nothing lands on a GPU."""
        for call in site.module.calls_in(site.scope.qualname):
            if call.method != "load_state_dict" or call.arg("state_dict", 0) is not site.node:
                continue
            receiver = call.receiver
            if receiver is None:
                return False
            name = call.receiver_name or ""
            if _TENSORLESS_OWNER.search(name.rsplit(".", 1)[-1]):
                return True
            for value in self.model.values.at_call(call, receiver):
                node = value.node
                if isinstance(node, cst.Call):
                    made = value.module.call_at(node)
                    made_api = self.model.api(made) if made is not None else None
                    if made_api is not None and (made_api.startswith("torch.optim.lr_scheduler.")
                                                 or made_api in api.GRAD_SCALERS):
                        return True
            return False
        return False

    def _one_file_per_pass(self, site: CallSite) -> bool:
        """The load reads one of many files per pass of a `for` loop: its path is the loop's
        variable or indexed by it (`for path in shard_files: torch.load(path)`, `files[i]` in
        `for i in order:`). That is a dataset read in shards, not a checkpoint, unless the loop
        hands what it loads to a `load_state_dict` (an ensemble of checkpoints)."""
        path = site.arg("f", 0)
        if path is None:
            return False
        used = {n.value for n in subexpressions(path) if isinstance(n, cst.Name)}
        for loop in site.loops:
            if not isinstance(loop, cst.For):
                continue
            bound = {n.value for n in subexpressions(loop.target) if isinstance(n, cst.Name)}
            if not bound & used:
                continue
            restores = any(call.method in ("load_state_dict", "load_checkpoint") and loop in call.loops
                           for call in site.module.calls_in(site.scope.qualname))
            return not restores
        return False

    def _used_as_data(self, site: CallSite) -> bool:
        """What the load reads is data, not a checkpoint: the name it is bound to is handed to a
        DataLoader, to a Dataset the project defines, or to a project function that builds one
        of those (`graphs = torch.load(shard)` then `loader = make_loader(graphs, batch, rank)`),
        and never to a `load_state_dict` (nor an entry of it: `ckpt["model"]`)."""
        name = bound_name(site)
        if name is None:
            return False
        data = False
        for call in site.module.calls_in(site.scope.qualname):
            if call.index <= site.index:
                continue
            handed = [a.value for a in call.node.args]
            if not any(_reads(value, name) for value in handed):
                continue
            if call.method == "load_state_dict":
                return False  # a checkpoint after all
            if any(isinstance(v, cst.Name) and v.value == name for v in handed) and self._builds_data(call, name):
                data = True
        return data

    def _memoized(self, site: CallSite) -> bool:
        """The load reads back a result the same function otherwise computes and saves
        (`if os.path.exists(pkl): emb = torch.load(f)` / `else: emb = compute(...);
        torch.save(emb, f)`): a cache of computed outputs, not a checkpoint of a model."""
        name = bound_name(site)
        if name is None or "." in name:
            return False
        for call in site.module.calls_in(site.scope.qualname):
            if self.model.api(call) != api.SAVE:
                continue
            obj = call.arg("obj", 0)
            if isinstance(obj, cst.Name) and obj.value == name and exclusive_arms(site.guards, call.guards):
                return True
        return False

    def _builds_data(self, call: CallSite, name: str) -> bool:
        """`call` makes a DataLoader or a Dataset of `name`, itself or in the body of the project
        function it runs, which hands the parameter `name` is passed to on to that DataLoader
        (`make_loader(graphs, ...)` returning `DataLoader(graphs, ...)`). A function that builds
        a loader of something else (`train(model, data, ...)` batching `data`) does not make the
        model it is handed data."""
        model = self.model
        if model.api(call) in _TORCH_DATASETS or any(model.makes(call, kind) for kind in _DATA_CLASSES):
            return True
        for function, bound in model.graph.targets(call):
            params = [p for p in function.params()
                      if isinstance(model.graph.argument_for(call, function, p, bound), cst.Name)
                      and cast(cst.Name, model.graph.argument_for(call, function, p, bound)).value == name]
            for inner in function.module.calls_in(function.qualname):
                if not any(model.makes(inner, kind) for kind in _DATA_CLASSES):
                    continue
                if any(_reads(a.value, p.name) for a in inner.node.args for p in params):
                    return True
        return False

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


def _reads(node: cst.CSTNode, name: str) -> bool:
    """`node` reads the local `name` (`ckpt`, `ckpt["model"]`, `ckpt.get("model")`)."""
    return any(isinstance(sub, cst.Name) and sub.value == name for sub in subexpressions(node))


def _to_cpu(node: cst.CSTNode) -> bool:
    """`x.cpu()` or `x.to("cpu")` somewhere in `node`."""
    for sub in subexpressions(node):
        if isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute):
            method = sub.func.attr.value
            if method == "cpu" or method == "to" and sub.args and string_text(sub.args[0].value) == "cpu":
                return True
    return False


def _matches_no_device(given: cst.BaseExpression) -> bool:
    """A literal `map_location` dict whose keys are all the bare "cuda" (`{"cuda": "cpu"}`):
    torch.load matches the keys against the saved storages' tags, which always name an index
    ("cuda:0"), so the map moves nothing."""
    if not isinstance(given, cst.Dict) or not given.elements:
        return False
    return all(isinstance(e, cst.DictElement) and string_text(e.key) == "cuda" for e in given.elements)


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
