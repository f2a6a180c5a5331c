from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only
from ddpcheck.lint.model.ddp import before, holds_ddp
from ddpcheck.lint.model.module import CallSite, ModuleModel, Point, Scope
from ddpcheck.lint.model.syntax import argument, dotted, subexpressions
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.values import Value
from ddpcheck.lint.rule import Invalid, Replace, Rule
from ddpcheck.lint.rules._checkpoints import (
    loaded_through_stripper, plain_readers, project_loads_wrapped, project_reads_into_ddp, project_strips, same_file,
    saved_file_names, spelled_files, strips_module_prefix, wraps_or_joins,
)
from ddpcheck.lint.model.project import resolved_path
from ddpcheck.lint.model.scripts import project_files
from ddpcheck.lint.rules._wrappers import saved_state_dicts


class DdpStateDictPrefix(Rule):
    """A checkpoint saves the DDP wrapper's `state_dict()`, whose keys all start with `module.`.

    `DistributedDataParallel` holds the model as its `module` attribute, so
    `ddp_model.state_dict()` names every tensor `module.<name>`. A checkpoint written that way
    does not load into the plain model used for inference, fine-tuning or a single-GPU resume.

    ## Why it matters
    Loading it later fails with `Missing key(s) in state_dict: "conv1.weight", ... Unexpected
    key(s) in state_dict: "module.conv1.weight", ...`, or, with `strict=False`, silently loads
    nothing and evaluates a randomly initialised model.

    Reported at the `state_dict()` call whose result `torch.save` writes, directly, inside the
    object it saves (also a dict filled entry by entry before the save: `ckpt = {}; ckpt["G"] =
    G.state_dict()`; also a dict keyed by the names of `named_parameters()`, `{k: v for k, v in
    model.named_parameters() if "lora_" in k}` or `dict(...)`, written there or in a project helper
    handed those pairs, reported at the `named_parameters()` call), or through a project save helper: one that takes the object as a parameter,
    or forwards its `*args` (`def save_on_master(*args, **kwargs): torch.save(*args, **kwargs)`
    called as `save_on_master(model.state_dict(), path)`; a caller that passes a `*` of its own
    is not read). The DDP model compiled afterwards (`torch.compile(DDP(model))`, keys
    `_orig_mod.module.`; DDP024 reports the compile's part) counts as the DDP model. Not a name
    bound to the inner model where the model is wrapped and to the model itself where it is not,
    under the same test (`if cfg.distributed: self.g = self.G.module`, `else: self.g = self.G`,
    with `self.G = DDP(self.G)` only under `if cfg.distributed:`): it never holds the wrapper.

    Informational, since a project may always load into a DDP model. Not reported when the file
    loads checkpoints into the DDP model itself (also by handing it to a project function that
    loads a state dict read from a file in its own body, or through a call that passes the model
    on; not a training function that only builds a loss network loading its own pretrained
    weights) (unless a plain-model script beside it — a
    single-GPU twin of the training script — reads them through the same project loader, or
    one that wraps no model, joins no process group and saves no checkpoint loads the entry the
    run saves the DDP state dict under, `model.load_state_dict(checkpoint["model"])` in an evaluation script; and
    only for the files those loads read: where every such load spells its file name and a state
    dict is saved only under other names, `best_model.prm` beside the `checkpoint.pth` a resume
    reads, that save is still reported, not one whose checkpoint is also saved as the file the
    resume reads; `{}` in a name matches any text; where every such load reads an entry of the
    checkpoint, `ddp.load_state_dict(ckpt["model_state_dict"])`, a state dict saved bare,
    `torch.save(model.state_dict(), "best.pth")`, is still reported: it has no such entry),
    strips the prefix (`"module."` or `"_orig_mod.module."` appears in the file, or
    `consume_prefix_in_state_dict_if_present` is used, or a state dict is rebuilt with its keys
    cut at a fixed position, `for k, v in sd.items(): new_sd[k[7:]] = v`; not a loop that writes
    the stripped copies back into the wrapper's own state dict, `state = model.state_dict()` then
    `state[k.replace("module.", "")] = v`, which keeps every prefixed key), loads through a project function that strips it (`load_state_dict(fix_keys(
    torch.load(path)))`), has a script beside it or below its folder that hands a model to a
    project loader, defined anywhere in the project, that loads a checkpoint into it and strips
    the prefix (`load_weights(net, cfg.test.model_path)`), or that loads checkpoints and
    strips it (an inference or export script the run never imports; not a network's constructor
    that renames the keys of pretrained weights it loads into one of its parts, `self.backbone.
    load_state_dict(...)`, nor, for a load in a module's top-level code, the functions and classes
    defined in that module) or, saving nothing and
    running no distributed job itself, loads them into a model a `DataParallel` wrapper holds, or,
    saving nothing, loads them into a model the DDP wrapper holds (a distributed inference script;
    not one whose load spells only other file names than the run's saves spell: another
    example's `final_model.pth` beside the run's `best_metric_model.pth`) (its keys carry the same prefix; a script that saves too counts where the code around its
    load names the file the run saves, such as a single-GPU twin resuming from `best.pth`, or
    numbered snapshots read back as the run writes them, `str(i) + '.pt'`), saves
    `ddp_model.module.state_dict()` (also as `(m.module if multi_gpu else m).state_dict()` or
    after `if args.distributed: model = model.module`), or saves in a branch no run takes (`if log_every > 0:` in a
    helper every caller leaves at its default 0), or in a function of the script that no run
    reaches (a save helper called only from a second set-up left beside the one the `__main__`
    block calls, which nothing calls or names).

    ## How to fix
    Save `ddp_model.module.state_dict()` (the fix does that; unsafe, since it changes the
    checkpoint's keys), or strip the prefix on load with
    `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")`.

    ## References
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP019"
    name = "ddp-state-dict-prefix"
    severity = Severity.INFO
    fixable = True

    VALID = [
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp_model = DDP(model, device_ids=[rank])
        if rank == 0:
            torch.save(ddp_model.module.state_dict(), "model.pt")
        """,
        """
        # Saved before wrapping, or the plain model under another name.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.save(model.state_dict(), "init.pt")
        model = DDP(model)
        torch.save({"model": model_without_ddp.state_dict()}, "ckpt.pt")
        """,
        """
        # Round trip through the DDP model: consistent.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        model.load_state_dict(torch.load("ckpt.pt", map_location="cpu"))
        torch.save(model.state_dict(), "ckpt.pt")
        """,
        """
        # The project's loader renames the wrapper's keys when it reads a checkpoint back.
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        class GPT2LMModel(torch.nn.Module):
            def load_weight(self, state_dict):
                state_dict = state_dict.get("model_state_dict", state_dict)
                for key in list(state_dict):
                    if key.startswith("module.transformer."):
                        state_dict[key[len("module.transformer."):]] = state_dict.pop(key)
                self.transformer.load_state_dict(state_dict, strict=False)

        net = GPT2LMModel(config)
        if args.init_checkpoint:
            net.load_weight(torch.load(args.init_checkpoint, map_location="cpu"))
        model = DDP(net.cuda(), device_ids=[args.local_rank])
        if args.rank == 0:
            torch.save({"model_state_dict": model.state_dict()}, "model.pt")
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            ddp_model = DDP(model, device_ids=[rank])
            torch.save(ddp_model.state_dict(), "model.pt")
            """,
            lines=(4,),
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            ddp_model = DDP(model, device_ids=[rank])
            torch.save(ddp_model.module.state_dict(), "model.pt")
            """,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.parallel.DistributedDataParallel(model)
            state = {"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}
            torch.save(state, path)
            """,
            lines=(3,),
        ),
        Invalid(
            """
            # Resumed into the plain model before wrapping: the saved prefix will not load back.
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model.load_state_dict(torch.load("last.pt", map_location="cpu"))
            model = DDP(model)
            torch.save(model.state_dict(), "last.pt")
            """,
            lines=(6,),
        ),
        Invalid(
            """
            # Loading buffers averaged across ranks back into the DDP model is no checkpoint reload.
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            def all_reduce_norm(module):
                states = {k: v.clone() for k, v in module.state_dict().items() if "running" in k}
                for value in states.values():
                    dist.all_reduce(value)
                module.load_state_dict(states, strict=False)

            model = DDP(model, device_ids=[rank])
            for epoch in range(epochs):
                train_one_epoch(model)
                all_reduce_norm(model)
                if rank == 0:
                    torch.save({"model": model.state_dict(), "epoch": epoch}, "last.pth")
            """,
            lines=(17,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        found = [(save, value, sd) for save, value, sd, where in saved_state_dicts(model)
                 if model.paths.restricted(save) != "never" and not model.paths.never_runs(save)
                 and self._of_ddp(where, save)]
        if not found:
            return
        if any(strips_module_prefix(_stripping_text(m)) for m in {id(s.module): s.module for s, _, _ in found}.values()) \
                or strips_module_prefix(_stripping_text(model.root)):
            return
        if self._loader_strips() or loaded_through_stripper(model, strips_module_prefix) \
                or project_strips(model, strips_module_prefix) \
                or project_loads_wrapped(model, saved_file_names(model, [save for save, _, _ in found])) \
                or project_reads_into_ddp(model, [save for save, _, _ in found]):
            return  # the project's loading code strips the prefix (`key[len("module."):]`)
        loaders: list[Function] = []
        read: list[frozenset[str] | None] = []
        self._entry_loads: list[bool] = []
        if self._loads_into_ddp(loaders, read) and not plain_readers(model, loaders) \
                and not self._plain_entry_readers(found):
            # Checkpoints are loaded into the DDP model: the prefix round-trips — for the files
            # those loads read. A save to a file none of them reads (`best_model.pth` beside
            # the `checkpoint.pth` a resume reads) is not read back that way.
            found = self._not_read_back(found, read)
            if not found:
                return
        for site, value, sd in found:
            assert isinstance(sd.func, cst.Attribute)
            receiver = " ".join(value.module.code(sd.func.value).split())
            new = sd.with_changes(
                func=sd.func.with_changes(value=cst.Attribute(sd.func.value, cst.Name("module")))
            )
            method = sd.func.attr.value  # `state_dict`, or `named_parameters` whose names key a saved dict
            fix = Replace(sd, new, f"Save `{receiver}.module.{method}()`") if value.module is model.root else None
            self.report(
                sd,
                f"`{receiver}.{method}()` of the DDP model saves every key with a `module.` "
                f"prefix, which the plain model cannot load; save `{receiver}.module.{method}()`",
                fix, module=value.module, related=model.paths.chain(site),
            )

    def _of_ddp(self, state_dict: CallSite, save: CallSite) -> bool:
        """`x.state_dict()` where x holds the DDP wrapper when the save runs — not in the branch
        of a `... if ddp else ...` (or `if isinstance(m, DDP)`) that only a plain model takes."""
        if self.model.paths.single_only(state_dict) or self.model.paths.unwrapped_only(state_dict):
            return False
        receiver = state_dict.receiver
        assert receiver is not None
        site = save if state_dict.scope is save.scope else state_dict
        if self._inner_on_every_arm(state_dict, receiver):
            return False
        values = self.model.values.at_call(state_dict, receiver)
        if any(_inner_module(v.node) for v in values):
            # `(m.module if cond else m)`, `if cond: m = m.module`: the code saves the inner
            # model whenever it takes the model to be wrapped; which runs take the other arm
            # depends on how `cond` and the wrap agree, which this does not follow.
            return False
        return any(holds_ddp(self.model, v) and before(v, site) for v in values)

    def _inner_on_every_arm(self, site: CallSite, receiver: cst.BaseExpression) -> bool:
        """The receiver is bound to the inner model where the model is wrapped and to the model
        itself where it is not, under the same test (`if cfg.distributed: self.g = self.G.module`,
        `else: self.g = self.G`, with `self.G = DDP(...)` only under `if cfg.distributed:`): it
        never holds the wrapper. The test is matched by its text, in the scopes that bind the
        receiver (for `self.x`, the methods of the class)."""
        name = dotted(receiver)
        if not name:
            return False
        module = site.module
        scopes: list[Scope] = [site.scope]
        if name.startswith("self.") and "." in site.scope.qualname:
            owner = site.scope.qualname.rsplit(".", 1)[0] + "."
            scopes = [s for q, s in module.function_scopes.items() if q.startswith(owner)]

        def bindings(held: str) -> list[tuple[cst.BaseExpression, Point]]:
            found: list[tuple[cst.BaseExpression, Point]] = []
            for scope in scopes:
                for bound, point in zip(scope.assignments.get(held, []), scope.points.get(held, [])):
                    if not isinstance(bound, cst.BaseExpression) or point is None:
                        return []
                    found.append((bound, point))
            return found

        def arms(point: Point) -> set[tuple[str, bool]]:
            return {(" ".join(module.code(g.test).split()), g.negated) for g in point.guards}

        own = bindings(name)
        if not own or not any(_inner_module(b) for b, _ in own):
            return False
        for bound, point in own:
            if _inner_module(bound):
                continue
            held = dotted(bound)
            wraps = [p for b, p in bindings(held) if isinstance(b, cst.Call)
                     and self.model.qualname(module, b.func, site.scope) == api.DDP] if held else []
            if not wraps:
                return False
            mine = arms(point)
            if not all(any((test, not negated) in mine for test, negated in arms(p)) for p in wraps):
                return False
        return True

    def _not_read_back(self, found: list[tuple[CallSite, Value, cst.Call]], read: list[frozenset[str] | None]
                       ) -> list[tuple[CallSite, Value, cst.Call]]:
        """The saves of `found` whose state dict no load into the DDP model reads back: every file
        those loads read is spelled (`read`: the file names of each load, None where a load's path
        is not spelled, such as `args.resume`), and each file the state dict is saved to is
        spelled and differs from them."""
        if read and len(self._entry_loads) == len(read) and all(self._entry_loads):
            # Every such load reads an entry of the checkpoint (`ddp.load_state_dict(
            # ckpt["model_state_dict"])`): a state dict saved bare (`torch.save(model.state_dict(),
            # "best.pth")`) has no such entry, so none of them reads it back.
            bare = [(save, value, sd) for save, value, sd in found if self._saved_bare(save, sd)]
            if bare:
                return bare
        if not read or any(files is None for files in read):
            return []
        names = {name for files in read if files is not None for name in files}
        # One state dict saved to the file a resume reads and to another (`latest.pth` and
        # `best.pth` of the same checkpoint): that checkpoint is read back into the wrapper.
        read_back: set[int] = set()
        for save, value, sd in found:
            written = spelled_files(self.model, save.module, save.arg("f", 1), save.scope, at=save.point)
            if written is None or any(same_file(a, b) for a in written for b in names):
                read_back.add(id(sd))
        return [(save, value, sd) for save, value, sd in found if id(sd) not in read_back]

    def _saved_bare(self, save: CallSite, sd: cst.Call) -> bool:
        """`save` writes the state dict `sd` itself, not a dict that holds it: `torch.save(
        model.state_dict(), path)`, or a name bound to it alone."""
        obj = save.arg("obj", 0)
        if obj is sd:
            return True
        if not isinstance(obj, cst.Name):
            return False
        values = self.model.values.at_call(save, obj)
        return bool(values) and all(v.node is sd for v in values)

    def _loads_into_ddp(self, loaders: list[Function], read: list[frozenset[str] | None]) -> bool:
        """Checkpoints are loaded into the DDP model: `ddp.load_state_dict(torch.load(...)[k])`,
        or the DDP model handed to a function of the project that reads a file and loads a state
        dict into what it gets (`restart_from_checkpoint(path, state_dict=model)`; such functions
        are added to `loaders`). A state dict the run builds itself (buffers averaged across
        ranks and loaded back) is no checkpoint. The file names each such load reads go to
        `read` (None where they are not spelled)."""
        model = self.model
        found = False
        for site in model.paths.sites():
            if site.method == "load_state_dict":
                receiver = site.receiver
                assert receiver is not None
                loaded = site.arg("state_dict", 0)
                if loaded is not None and self._read_from_file(site, loaded) and any(
                    holds_ddp(model, v) and before(v, site) for v in model.values.at_call(site, receiver)
                ):
                    found = True
                    read.append(self._files_read(site, loaded))
                    self._entry_loads.append(_entry_of_load(loaded))
            elif site.target is not None and site.target.external is None:
                passed = [a for a in site.node.args
                          if any(holds_ddp(model, v) for v in model.values.at_call(site, a.value))]
                if not passed or not {"load_state_dict", "load"} <= model.facts.of_call(site):
                    continue
                targets = [(f, b) for f, b in model.graph.targets(site)
                           if self._loads_into(f, _receiving(site, f, b, passed), 2)]
                if targets:
                    found = True
                    loaders += [f for f, _ in targets]
                    read += [self._function_reads(f) for f, _ in targets]
                    self._entry_loads += [False for _ in targets]  # (what it loads is not read here)
        return found

    def _plain_entry_readers(self, found: list[tuple[CallSite, Value, cst.Call]]) -> bool:
        """Another script of the project, one that wraps no model, joins no process group and
        saves no checkpoint of its own (an evaluation script), loads the entry of a checkpoint the run saves the DDP state dict
        under into its model (`model.load_state_dict(checkpoint["model"])` beside the run's
        `{"model": model.state_dict(), ...}`): the resume's DDP load round-trips the prefix,
        that one does not."""
        model = self.model
        entries: set[str] = set()
        for save, _, sd in found:
            function = save.scope.function
            code = save.module.code(function.node) if function is not None else save.module.source
            made = re.escape(save.module.code(sd))
            for pattern in (rf"""(["'])(\w+)\1\s*:\s*{made}""", rf"""\[\s*(["'])(\w+)\1\s*\]\s*=\s*{made}"""):
                entries |= {m.group(2) for m in re.finditer(pattern, code)}
        if not entries:
            return False
        reads = re.compile(r"""load_state_dict\(\s*\w+\[\s*(["'])(%s)\1\s*\]""" % "|".join(map(re.escape, sorted(entries))))
        run = {resolved_path(m.path) for m in model.paths.modules()}
        for path in project_files(model.root.path):
            if path in run or model.project.passes(path, wraps_or_joins):
                continue
            text = model.project.text(path)
            if text is None or "torch.load(" not in text:
                continue
            code = code_only(text)
            # (A script that saves checkpoints too reads back its own: a single-GPU trainer
            # resuming from the `state["model"]` it wrote.)
            if "torch.load(" in code and "torch.save(" not in code and reads.search(code) is not None:
                return True
        return False

    def _loads_into(self, function: Function, names: set[str] | None, depth: int) -> bool:
        """`function` loads a state dict read from a file in its own body, or through a call that
        passes on one of `names` (its parameters that receive the DDP model; None: not known):
        not only into a network it builds for itself (a perceptual loss's pretrained VGG)."""
        model = self.model
        calls = function.module.calls_in(function.qualname)
        if any(c.method == "load_state_dict" for c in calls) and any(model.api(c) == api.LOAD for c in calls):
            return True
        if depth <= 1:
            return False
        for call in calls:
            if names is not None and not any(
                    isinstance(n, cst.Name) and n.value in names
                    for a in call.node.args for n in subexpressions(a.value)):
                continue
            if not {"load_state_dict", "load"} <= model.facts.of_call(call):
                continue
            if any(self._loads_into(f, None, depth - 1) for f, _ in model.graph.targets(call)):
                return True
        return False

    def _loader_strips(self) -> bool:
        """A function of the run that loads a state dict handles keys that start with `module.`
        (`if key.startswith("module.transformer."): ...`)."""
        model = self.model
        seen: set[tuple[int, str]] = set()
        for site in model.paths.sites():
            if site.method != "load_state_dict" and model.api(site) != api.LOAD:
                continue
            function = site.scope.function
            if function is None or (id(site.module), function.qualname) in seen:
                continue
            seen.add((id(site.module), function.qualname))
            if strips_module_prefix(site.module.code(function.node)):
                return True
        return False

    def _read_from_file(self, site: CallSite, expr: cst.BaseExpression) -> bool:
        """Whether `expr` holds (part of) what `torch.load` read: `ckpt["model"]` after `ckpt =
        torch.load(path)`, or a value a caller passes in from there."""
        model = self.model
        for value in model.values.at_call(site, expr):
            node = value.node
            if not isinstance(node, cst.CSTNode):
                continue
            for sub in subexpressions(node):
                if isinstance(sub, cst.Call) and model.qualname(value.module, sub.func, value.scope) == api.LOAD:
                    return True
                if isinstance(sub, cst.Name) and sub is not node and any(
                    v.call is not None and model.api_of(v) == api.LOAD
                    for v in model.values.of(value.module, sub, value.scope, value.frame, at=value.at)
                ):
                    return True
        return False


    def _files_read(self, site: CallSite, expr: cst.BaseExpression) -> frozenset[str] | None:
        """The file names the `torch.load` that `expr` comes from reads (see `_read_from_file`),
        None where its path is not spelled."""
        model = self.model
        names: set[str] = set()
        loads = 0
        for value in model.values.at_call(site, expr):
            node = value.node
            if not isinstance(node, cst.CSTNode):
                continue
            for sub in subexpressions(node):
                reads: list[tuple[Value, cst.Call]] = []
                if isinstance(sub, cst.Call) and model.qualname(value.module, sub.func, value.scope) == api.LOAD:
                    reads.append((value, sub))
                elif isinstance(sub, cst.Name) and sub is not node:
                    reads += [(v, v.call) for v in model.values.of(value.module, sub, value.scope, value.frame, at=value.at)
                              if v.call is not None and model.api_of(v) == api.LOAD]
                for where, call in reads:
                    files = spelled_files(model, where.module, argument(call, "f", 0), where.scope, where.frame, where.at)
                    if files is None:
                        return None
                    names |= files
                    loads += 1
        return frozenset(names) if loads else None

    def _function_reads(self, function: Function) -> frozenset[str] | None:
        """The file names the `torch.load` calls in `function`'s own body read; None where one
        is not spelled or the load happens further down."""
        names: set[str] = set()
        loads = [c for c in function.module.calls_in(function.qualname) if self.model.api(c) == api.LOAD]
        for call in loads:
            files = spelled_files(self.model, call.module, call.arg("f", 0), call.scope, at=call.point)
            if files is None:
                return None
            names |= files
        return frozenset(names) if loads else None


def _stripping_text(module: ModuleModel) -> str:
    """The module's source less its loops that write the stripped keys back into the wrapper's own
    state dict (`state = model.state_dict()`, then `for k, v in model.state_dict().items():
    state[k.replace("module.", "")] = v`): the dict saved keeps every `module.` key beside the
    copies, so a plain model still meets keys it does not have. Such a loop strips nothing."""
    memo = module.memo.get("ddp019_stripping_text")
    if isinstance(memo, str):
        return memo
    cuts: list[list[str]] = []
    for loop in module.fors:
        node = loop.node
        if not (isinstance(node.iter, cst.Call) and isinstance(node.iter.func, cst.Attribute)
                and node.iter.func.attr.value == "items"):
            continue
        if any(isinstance(sub, cst.Del) or isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute)
               and sub.func.attr.value == "pop" for sub in subexpressions(node.body)):
            continue  # (the old key dropped as the new one is written: a strip in place)
        for sub in subexpressions(node.body):
            if not (isinstance(sub, cst.Assign) and len(sub.targets) == 1
                    and isinstance(sub.targets[0].target, cst.Subscript)):
                continue
            held = dotted(sub.targets[0].target.value)
            bound = loop.scope.assignments.get(held, []) if held is not None else []
            if bound and all(isinstance(b, cst.Call) and isinstance(b.func, cst.Attribute)
                             and b.func.attr.value == "state_dict" and not b.args for b in bound):
                text = cst.Module(body=[]).code_for_node(node.with_changes(leading_lines=()))
                cuts.append([line.strip() for line in text.splitlines()])
                break
    lines = module.source.splitlines()
    for cut in cuts:
        # (The loop's own lines, matched without their indentation: it may sit in a function.)
        for start in range(len(lines) - len(cut) + 1):
            if all(lines[start + i].strip() == want for i, want in enumerate(cut)):
                del lines[start:start + len(cut)]
                break
    source = "\n".join(lines)
    module.memo["ddp019_stripping_text"] = source
    return source


def _entry_of_load(loaded: cst.BaseExpression) -> bool:
    """The state dict loaded is an entry, spelled by a literal key, of what was read
    (`ckpt["model_state_dict"]`, `torch.load(path)["model"]`)."""
    return isinstance(loaded, cst.Subscript) and len(loaded.slice) == 1 \
        and isinstance(loaded.slice[0].slice, cst.Index) and isinstance(loaded.slice[0].slice.value, cst.SimpleString)


def _inner_module(node: object) -> bool:
    """`x.module`: the model a wrapper holds."""
    return isinstance(node, cst.Attribute) and node.attr.value == "module"


def _receiving(site: CallSite, function: Function, bound: str, passed: list[cst.Arg]) -> set[str] | None:
    """The parameters of `function` that take the arguments `passed` at `site` (None: not known)."""
    node = function.module.functions.get(function.qualname)
    if node is None or bound in ("spawn", "process"):
        return None
    params = [*node.params.posonly_params, *node.params.params]
    shift = 1 if bound else 0
    names: set[str] = set()
    positional = 0
    for arg in site.node.args:
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg in passed:
                names.add(arg.keyword.value)
            continue
        if arg in passed:
            if positional + shift >= len(params):
                return None
            names.add(params[positional + shift].name.value)
        positional += 1
    return names
