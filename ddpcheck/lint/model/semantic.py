"""The semantic model of one linted file in its project: the one object every rule queries.

    model.root                  the linted module (calls, functions, classes, scopes...)
    model.api(call)             the canonical API name a call runs (`torch.save`), or None
    model.qualname(module, e)   the canonical API name an expression names
    model.values.of(m, e, s)    what an expression may hold (values.py)
    model.graph.targets(call)   the project functions a call runs (graph.py)
    model.facts.of_call(call)   what a call does, through the functions it runs (facts.py)
    model.paths.ranks(c)        which ranks run a call: never/single/main/node/other/some/every/unknown
    model.paths.every_rank(c)   whether a call runs on every rank, and along which calls (paths.py)
    model.paths.sites()         the file's calls and those of the functions it reaches elsewhere
    model.uses_ddp              whether the file takes part in DDP training

Everything is computed lazily and memoised for the file; the project's modules (project.py)
are shared by every file of the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Sequence
from typing import cast

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.facts import Facts
from ddpcheck.lint.model.graph import CallGraph
from ddpcheck.lint.model.index import code_only, join_import
from ddpcheck.lint.model.module import UNASKED, Binding, CallSite, Guard, ModuleModel, Param, Point, Scope, Target
from ddpcheck.lint.model.paths import Paths
from ddpcheck.lint.model.project import Project, locate, resolved_path
from ddpcheck.lint.model.resolve import Resolver
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import dotted, statements, string_text, subexpressions
from ddpcheck.lint.model.values import Value, Values

_ENTRY_TEXT = ("__main__",)
# A command that launches a script with torchrun or torch's launch modules, and the script it names.
# Packaging files and the console-script entries they declare (`name = package.module:function`).
_PACKAGING = ("setup.py", "setup.cfg", "pyproject.toml")
_SCRIPTS_SECTION = re.compile(r"console_scripts|gui_scripts|\[project\.scripts\]|\[tool\.poetry\.scripts\]")
_ENTRY = re.compile(r"""[\w.-]+['"]?\s*=\s*['"]?\s*([A-Za-z_][\w.]*)\s*:\s*[A-Za-z_][\w.]*""")
_LAUNCH_USAGE = re.compile(
    r"(?:\btorchrun\b|-m\s+torch\.distributed\.(?:launch|run)\b|\btorch\.distributed\.(?:launch|run)\s+--)"
    r"[^\n'\"]*?\s([\w./-]+\.py)\b"
)
# Values a flag may hold that can be read as a rank test.
_FLAG_VALUES = (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation, cst.Call, cst.Name, cst.Attribute,
                cst.Subscript, cst.IfExp)


class Model:
    def __init__(self, root: ModuleModel, project: Project | None, defer: bool = False) -> None:
        self.root = root
        self.project = project if project is not None else Project()
        self.resolver = Resolver(self.project if resolved_path(root.path) is not None else None)
        self.graph = CallGraph(self)
        self.values = Values(self)
        self.facts = Facts(self)
        self.paths = Paths(self)
        self._resolvers: dict[tuple[int, int], Names] = {}
        self._uses_ddp: bool | None = None
        self._torchrun: bool | None = None
        self._own_keys: frozenset[str] | None = None
        self._one_machine: bool | None = None
        self._imported: dict[int, list[ModuleModel]] = {}
        if not defer:
            self.start()

    def start(self) -> None:
        """Resolve the names of the root's calls (after its traversal, when every import and
        definition of the file is known)."""
        self.project.linting(self.root)
        self.resolver.resolve_calls(self.root)

    # --- modules -----------------------------------------------------------------------------
    def project_model(self, path: Path) -> ModuleModel | None:
        """The model of a project module (the linted file's own when `path` is it)."""
        if str(path) == str(resolved_path(self.root.path)):
            return self.root
        module = self.project.model(path)
        if module is not None and "resolved" not in module.memo:
            module.memo["resolved"] = True
            Resolver(self.project).resolve_calls(module)
        return module

    def imported_modules(self, module: ModuleModel) -> list[ModuleModel]:
        """The project modules `module` imports at its top level (also inside a top-level `try:`),
        in order: their own top-level code runs when `module` is loaded (`import dist_utils`
        whose last line is `builtins.print = rank0_print`)."""
        found = self._imported.get(id(module))
        if found is None:
            here = resolved_path(module.path)
            modules: dict[int, ModuleModel] = {}
            if here is not None:
                for statement in _top_statements(module.tree.body):
                    for small in statement.body:
                        for origin in import_origins(small):
                            where = locate(here, origin)
                            other = self.project_model(where[0]) if where is not None else None
                            if other is not None and other is not module and other is not self.root:
                                modules[id(other)] = other
            found = self._imported[id(module)] = list(modules.values())
        return found

    def is_root(self, target: Target) -> bool:
        """Whether a project Target lies in the linted file itself."""
        return target.path is not None and str(target.path) == str(resolved_path(self.root.path))

    @property
    def reach_complete(self) -> bool:
        return self.paths.complete

    def edges_into(self, function: Function) -> list[tuple[CallSite, str]]:
        return self.paths.edges_into(function)

    # --- names -------------------------------------------------------------------------------
    def resolve_in(self, path: Path, name: str) -> Target | None:
        return self.resolver.in_module(path, name)

    def qualname(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope | None = None) -> str | None:
        """The canonical API name `expr` names in `module` (through imports, re-exports, stars)."""
        return self.resolver.qualname(module, expr, scope)

    def resolver_for(self, module: ModuleModel, scope: Scope | None = None) -> Names:
        """A name reader for the condition readers (conditions.py): canonical API names in
        `module` and, inside `scope`, whether a variable holds a rank (`device_id =
        int(os.environ["LOCAL_RANK"])`)."""
        key = (id(module), id(scope))
        found = self._resolvers.get(key)
        if found is None:
            found = Names(self, module, scope)
            self._resolvers[key] = found
        return found

    def api(self, site: CallSite) -> str | None:
        """The canonical API name `site` calls, including methods of objects the value flow
        knows (`comm.bcast(x)` after `comm = MPI.COMM_WORLD`)."""
        found = site.api_memo
        if found is not UNASKED:
            return cast("str | None", found)  # what _api answered the first time
        # Asked again while this answer is being worked out (a value that flows through the call
        # itself, `x = f(x)` across methods): unknown from there, not an endless descent.
        site.api_memo = None
        found = self._api(site)
        site.api_memo = found
        return found

    def _api(self, site: CallSite) -> str | None:
        if site.qualname is not None:
            return site.qualname
        held = self.callee_apis(site)
        if len(held) == 1:
            return next(iter(held))
        method = site.method
        if method in api.MPI_COLLECTIVE_METHODS or method in api.MPI_RANK_METHODS:
            receiver = site.receiver
            assert receiver is not None
            for value in self.values.at_call(site, receiver):
                node = value.node
                if isinstance(node, (cst.Name, cst.Attribute)):
                    origin = self.qualname(value.module, node, value.scope)
                    if origin == api.MPI_COMM_WORLD:
                        return f"{api.MPI_COMM_WORLD}.{method}"
        return None

    def callee_apis(self, site: CallSite) -> frozenset[str]:
        """The outside APIs a call may run when its callee is a variable holding them
        (`sampler_cls = RandomSampler if single else DistributedSampler; sampler_cls(ds)`)."""
        if site.qualname is not None:
            return frozenset({site.qualname})
        func = site.node.func
        if not isinstance(func, cst.Name) or not site.scope.lookup(func.value):
            return frozenset()
        memo: dict[int, frozenset[str]] = site.module.memo.setdefault("callee_apis", {})
        found = memo.get(id(site.node))
        if found is None:
            names = set()
            for value in self.values.at_call(site, func):
                if isinstance(value.node, (cst.Name, cst.Attribute)):
                    name = self.qualname(value.module, value.node, value.scope)
                    if name is not None:
                        names.add(name)
            found = frozenset(names)
            memo[id(site.node)] = found
        return found

    def builds_optimizer(self, site: CallSite) -> bool:
        """`site` makes an optimizer: a torch one (`torch.optim.SGD(...)`), another library's
        built the same way, or a project class derived from `torch.optim.Optimizer` (`class
        Lars(Optimizer)`, made as `Lars(params, lr=lr)`)."""
        return api.is_optimizer(self.api(site)) or self.makes(site, api.OPTIMIZER_BASE)

    def api_of(self, value: Value) -> str | None:
        """The API a leaf value calls (`DDP(model)` → torch.nn.parallel.DistributedDataParallel)."""
        call = value.call
        if call is None:
            return None
        site = value.module.call_at(call)
        if site is not None:
            return self.api(site)
        return self.qualname(value.module, call.func, value.scope)

    def made_by(self, site: CallSite, expr: cst.BaseExpression) -> list[tuple[cst.Call, str | None]] | None:
        """The calls that make every value `expr` may hold at `site` (`fh = logging.FileHandler(
        path)`, `nn.CrossEntropyLoss()`), each with the qualified name of what it calls; None
        when no value is known or one is not made by a call."""
        values = self.values.at_call(site, expr)
        if not values:
            return None
        made: list[tuple[cst.Call, str | None]] = []
        for value in values:
            node = value.node
            if not isinstance(node, cst.Call):
                return None
            made.append((node, self.qualname(value.module, node.func, value.scope)))
        return made

    def makes(self, site: CallSite, api_class: str) -> bool:
        """Whether a call builds an instance of the outside class `api_class` or of a project
        class derived from it (`torch_geometric.loader.DataLoader` inside that library)."""
        name = self.api(site)
        if name == api_class or (name is not None and api.derived_from(name) == api_class):
            return True
        target = site.target
        return target is not None and target.kind == "class" and target.external is None \
            and self.graph.is_subclass(target, api_class)

    def shards_like_distributed_sampler(self, site: CallSite) -> bool:
        """A DistributedSampler, or a project sampler written the same way (a `Sampler` subclass
        that splits by `num_replicas` and pads to a `total_size`, as copies of torch's do)."""
        if self.makes(site, api.DISTRIBUTED_SAMPLER):
            return True
        target = site.target
        if target is None or target.kind != "class" or not self.graph.is_subclass(target, api.SAMPLER):
            return False
        found = self.graph.class_at(target)
        if found is None:
            return False
        code = code_only(found[0].code(found[1].node))
        return "num_replicas" in code and "total_size" in code

    def constructs(self, value: Value, api_class: str) -> bool:
        """Whether a leaf value is an instance of the outside class `api_class`, made by calling
        it or a project subclass of it (a padding sampler derived from `Sampler`)."""
        call = value.call
        if call is None:
            return False
        site = value.module.call_at(call)
        names = self.callee_apis(site) if site is not None else frozenset()
        name = self.api_of(value)
        for name in ({name} if name is not None else set()) | names:
            if name == api_class or self.graph.is_subclass(Target(name), api_class):
                return True
        return site is not None and site.target is not None and site.target.kind == "class" \
            and self.graph.is_subclass(site.target, api_class)

    # --- whole-file facts ----------------------------------------------------------------------
    def settle_file_answers(self) -> None:
        """Find whether the file takes part in DDP and whether an outside launcher can start it,
        each with a whole evaluation budget: the answers every rule then reads are the same
        whichever rule asks first and whatever it has spent."""
        self.values.fresh_budget()
        self.uses_ddp  # noqa: B018 (computed and kept)
        self.values.fresh_budget()
        self.torchrun_path  # noqa: B018

    @property
    def uses_ddp(self) -> bool:
        """The file takes part in DDP training: it initialises a process group, wraps a model in
        DDP, imports from torch.distributed, or uses a DistributedSampler (itself, or through
        the project's modules)."""
        if self._uses_ddp is None:
            root = self.root
            self._uses_ddp = (
                root.names.imports_from("torch.distributed")
                or any(api.canonical(v) == api.DISTRIBUTED_SAMPLER for v in root.names.aliases.values())
                or any(c.qualname in (api.INIT_PROCESS_GROUP, api.DDP, api.DISTRIBUTED_SAMPLER)
                       or (c.qualname or "").startswith("torch.distributed.") for c in root.calls)
                or any(self.facts.does(c, "init_process_group") for c in root.calls if c.target is not None)
            )
        return self._uses_ddp

    @property
    def torchrun_path(self) -> bool:
        """torchrun (or another outside launcher) can start the file: it reads LOCAL_RANK, RANK
        or WORLD_SIZE from the environment, itself or through the functions it calls."""
        if self._torchrun is None:
            root = self.root
            own = self.own_launcher_keys
            self._torchrun = any(not a.written and a.key in api.LAUNCHER_ENV and a.key not in own
                                 for a in root.env) or any(
                "reads_launcher_env" in self.facts.of_call(c) for c in root.calls
            )
        return self._torchrun

    @property
    def own_launcher_keys(self) -> frozenset[str]:
        """Launcher variables the linted file sets itself, unconditionally, and never asks for
        otherwise (`"RANK" in os.environ`, `os.environ.get("RANK")`): a spawned worker that stores
        its own rank there and reads it back (itself or in helpers) says nothing of an outside
        launcher."""
        if self._own_keys is None:
            root = self.root
            self._own_keys = frozenset(
                a.key for a in root.env if a.written and not a.guards and a.key in api.LAUNCHER_ENV
                and not re.search(r"""['"]%s['"]\s*(?:not\s+)?in\b|(?:get|getenv|setdefault)\s*\(\s*['"]%s['"]"""
                                  % (re.escape(a.key), re.escape(a.key)), root.source))
        return self._own_keys

    def starts_workers(self) -> bool:
        """The linted file starts its own worker processes (`mp.spawn`, `multiprocessing.Process`,
        itself or through a project function that does)."""
        root = self.root
        return any(self.api(c) in api.PROCESS_STARTERS for c in root.calls) or any(
            "spawn" in self.facts.of_call(c) for c in root.calls if c.target is not None and c.target.external is None)

    def on_one_machine(self) -> bool:
        """The job cannot span machines: every rendezvous address it sets is a loopback one
        (`os.environ["MASTER_ADDR"] = "localhost"`, `init_method="tcp://127.0.0.1:..."`), at
        least one of them, and either no outside launcher can start the file (see
        `torchrun_path`) and it starts its processes with `mp.spawn`, or it overwrites the
        address on every path."""
        if self._one_machine is None:
            found = self._on_one_machine()
            if self.values.budget <= 0 or not self.reach_complete:
                # Cut short by the asking rule's budget, or asked before every caller is known
                # (values of parameters come from callers): kept only when it is the file's answer.
                return found
            self._one_machine = found
        return self._one_machine

    def _on_one_machine(self) -> bool:
        root = self.root
        # The file, and the project functions it calls that set up the process group themselves
        # (`setup_norank(world_size)` in utils.py writing MASTER_ADDR, then init_process_group).
        places: list[tuple[ModuleModel, cst.CSTNode, Scope | None]] = [(root, root.tree, None)]
        for call in root.calls:
            for function, _ in self.graph.targets(call) if call.target is not None else ():
                if function.module is not root and any(
                        c.scope is function.scope and self.api(c) == api.INIT_PROCESS_GROUP
                        for c in function.module.calls):
                    places.append((function.module, function.node, function.scope))
        # A function of the file that nothing calls or names (a `run_local` set-up left beside
        # the launcher's path) never runs: neither its writes nor its process group count.
        unrun = {id(a.node) for a in root.env if a.written and a.key == "MASTER_ADDR"
                 and a.scope.function is not None and self.paths.uncalled_function(
                     Function(root, a.scope.function.qualname))}
        if self.torchrun_path or not any(self.facts.does(c, "spawn") for c in root.calls):
            # Started by a launcher (torchrun, srun): one machine only where the file (or the
            # helper that sets up the group) overwrites the rendezvous address on every path
            # (`os.environ["MASTER_ADDR"] = "localhost"` with no condition), so ranks on a second
            # machine would never meet the first.
            written = [[a for a in module.env if a.written and a.key == "MASTER_ADDR" and id(a.node) not in unrun
                        and (scope is None or a.scope is scope)] for module, _, scope in places]
            if any(a.guards for writes in written for a in writes):
                return False
            if not written[0] and (len(places) == 1 or not all(written[1:])):
                return False  # (each helper that sets up the group writes it, where the file does not)
        addresses: list[cst.BaseExpression] = []
        for _, node_of, _ in places:
            for node in statements(node_of):
                if isinstance(node, cst.Assign) and len(node.targets) == 1:
                    target = node.targets[0].target
                    if isinstance(target, cst.Subscript) and (dotted(target.value) or "").endswith("environ") \
                            and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) \
                            and string_text(target.slice[0].slice.value) == "MASTER_ADDR" \
                            and id(target) not in unrun:
                        addresses.append(node.value)
        for site in [c for module, _, scope in places for c in module.calls
                     if (module is root or c.scope is scope) and not (module is root and self.paths.uncalled(c))]:
            if self.api(site) == api.INIT_PROCESS_GROUP:
                method = site.arg("init_method", 1)
                if method is not None and not isinstance(method, cst.SimpleString):
                    # `init_method = "tcp://localhost:..."` kept in a variable first: what it holds.
                    held = self.values.at_call(site, method)
                    addresses.extend(v.node if isinstance(v.node, cst.BaseExpression) else method
                                     for v in held)
                    if not held:
                        addresses.append(method)
                elif method is not None:
                    addresses.append(method)
        return bool(addresses) and all(_loopback(a) for a in addresses)

    def is_entry_point(self) -> bool:
        """The file is run as a script, not only imported: it has a `__main__` guard, does work
        at module level (calls one of its functions, or sets up DDP there), or its own usage
        text launches it (`# Launch with: torchrun --nproc_per_node=2 script.py`, see
        launched_by_usage)."""
        root = self.root
        if root.main_guards or "__main__" in root.source and "__name__" in root.source:
            return True
        return any(
            c.scope is root.module_scope and (
                (c.target is not None and c.target.path is not None and c.target.kind in ("function", "class")
                 and c.module is root and c.dotted in root.functions)
                or (c.qualname or "").startswith("torch.distributed."))
            for c in root.calls
        ) or self.launched_by_usage() or any(
            # `init_distributed(args)` of another module called at module level: the file sets up
            # the process group when it runs, as only a script does.
            c.scope is root.module_scope and c.target is not None and self.facts.does(c, "init_process_group")
            for c in root.calls)

    def launched_by_usage(self) -> bool:
        """A launch command in the file's comments or strings (`torchrun ...`, `python -m
        torch.distributed.launch ...`) starts this file: the script it names is this one, or a
        name no file near it has (a placeholder such as `script.py`). A command naming another
        script of the project is about that script."""
        found = self.root.memo.get("launched_by_usage")
        if found is None:
            found = any(self._names_this_file(m.group(1)) for m in _LAUNCH_USAGE.finditer(self.root.source))
            self.root.memo["launched_by_usage"] = found
        return bool(found)

    def console_script(self) -> bool:
        """The file is a command the project installs: a packaging file of the project
        (`setup.py`, `setup.cfg`, `pyproject.toml`, in the file's folder or up to four above it)
        names it as a console script (`"stylegan2 = stylegan2.cli:main"`), so it runs as the
        program although it has no `__main__` block."""
        found = self.root.memo.get("console_script")
        if found is None:
            found = self._named_by_packaging()
            self.root.memo["console_script"] = found
        return bool(found)

    def _named_by_packaging(self) -> bool:
        path = resolved_path(self.root.path)
        if path is None:
            return False
        folder = path.parent
        for _ in range(5):
            for name in _PACKAGING:
                text = self.project.text(folder / name)
                if not text or not _SCRIPTS_SECTION.search(text):
                    continue
                for match in _ENTRY.finditer(text):
                    module = match.group(1)
                    for base in (folder, folder / "src"):
                        target = base.joinpath(*module.split("."))
                        if target.with_suffix(".py") == path or (target / "__init__.py") == path:
                            return True
            if folder.parent == folder:
                break
            folder = folder.parent
        return False

    def _names_this_file(self, script: str) -> bool:
        path = resolved_path(self.root.path)
        if path is None:
            return False
        if Path(script).name == path.name:
            return True
        folder = path.parent
        for _ in range(3):
            if (folder / script).is_file() or (folder / Path(script).name).is_file():
                return False  # another script of the project
            folder = folder.parent
        return True

    def init_sites(self) -> list[CallSite]:
        """The `init_process_group` calls the file's run goes through: its own, else those of the
        project functions it reaches (`utils.init_distributed_mode(args)`, a launcher's spawned
        worker), in the order they are reached."""
        direct = [c for c in self.root.calls if c.qualname == api.INIT_PROCESS_GROUP]
        if direct:
            return direct
        return [c for c in self.paths.sites() if c.module is not self.root and self.api(c) == api.INIT_PROCESS_GROUP]

    def text_of(self, module: ModuleModel, expr: cst.CSTNode) -> str:
        return " ".join(module.code(expr).split())

    def env_key(self, expr: cst.BaseExpression | None) -> str | None:
        return string_text(expr)

    def describe(self, expr: cst.BaseExpression) -> str:
        return dotted(expr) or self.text_of(self.root, expr)


class Names:
    """Callable as `resolve(expr) -> canonical API name`; also tells whether a name is bound to a
    rank read (see conditions.is_rank_value)."""

    def __init__(self, model: Model, module: ModuleModel, scope: Scope | None) -> None:
        self.model = model
        self.module = module
        self.scope = scope
        self._holding: set[str] = set()

    def __call__(self, expr: cst.BaseExpression) -> str | None:
        return self.model.resolver.qualname(self.module, expr)

    def progress_flag(self, expr: cst.BaseExpression) -> bool:
        """A local name the function sets both False and True, and to nothing else, True inside a
        loop (`embeddings_computed = False`, then `embeddings_computed = True` at the end of an
        epoch): a record of what the run has done so far, not of how it was launched (nor a
        name that says it is distributed, `distributed = False` then `if ...: distributed =
        True`)."""
        from ddpcheck.lint.model.conditions import is_distributed_test

        if self.scope is None or not isinstance(expr, cst.Name) or is_distributed_test(expr, self) is not None:
            return False
        bindings = self.scope.lookup(expr.value)
        if not bindings or self.scope.owner_of(expr.value) is not self.scope:
            return False
        values = [b.value if isinstance(b, cst.Name) else None for b in bindings]
        if set(values) != {"True", "False"}:
            return False
        points = self.scope.points.get(expr.value, [])
        return len(points) == len(bindings) and any(
            value == "True" and point is not None and point.loops for value, point in zip(values, points))

    def held_test(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The expressions a flag variable is assigned from (`ok = a and is_master()`), when every
        assignment is a test (a comparison, a boolean operation, a `not`, a call)."""
        name = dotted(expr)
        if self.scope is None or name is None or name in self._holding:
            return []  # (a flag defined from itself: `master = master and rank == 0`)
        self._holding.add(name)
        try:
            return self._held(name)
        finally:
            self._holding.discard(name)

    def held_sides(self, expr: cst.BaseExpression, depth: int) -> set[bool | None]:
        """What `selects_main_rank` says of the tests a flag holds: those it is assigned in this
        scope (`ok = a and is_master()`), else the values it is given on the way here (a
        parameter its callers pass `rank == 0`, `self.is_master` set from one); a literal False
        or None runs nowhere and says nothing. {None} when a value is not a test."""
        from ddpcheck.lint.model.conditions import selects_main_rank

        tests = self.held_test(expr) or self._item_set(expr)
        if tests:
            return {selects_main_rank(t, self, depth) for t in tests}
        name = dotted(expr)
        if self.scope is None or name is None or name in self._holding:
            return {None}
        own = self._attribute_tests(name, depth)
        if own is not None:
            return {own}
        self._holding.add(name)
        try:
            values = self.model.values.of(self.module, expr, self.scope, depth=8)
            literal = self._literal_flag_side(values)
            if literal is not None:
                return {literal}
            sides: set[bool | None] = set()
            falsy = _falsy_left_operands(values)
            for value in values:
                node = value.node
                if isinstance(node, cst.Name) and node.value in ("False", "None"):
                    continue
                if id(node) in falsy:
                    continue  # the value of `a and b` only where `a` is false: the flag fails there
                resolve = self.model.resolver_for(value.module, value.scope)
                if isinstance(node, cst.Name) and node.value == "True" and not value.arms \
                        and _demoted_elsewhere(value, values, self.model, depth):
                    # `self.verbose = True`, then `if rank != 0: self.verbose = False`: it stays
                    # true on rank 0 only.
                    sides.add(True)
                    continue
                if isinstance(node, cst.Name) and node.value == "True" and value.arms:
                    # `is_main = True if local_rank == 0 else False`: true where its arms hold.
                    sides.add(_arms_side(value.arms, resolve, depth))
                    if None in sides:
                        return {None}
                    continue
                if node is expr or not isinstance(node, _FLAG_VALUES):
                    return {None}
                sides.add(selects_main_rank(node, resolve, depth))
                if None in sides:
                    return {None}
            return sides or {None}
        finally:
            self._holding.discard(name)

    def main_rank_set(self, expr: cst.BaseExpression, depth: int) -> bool:
        """Whether every value a name may hold is a literal set of ranks that names rank 0 and
        no other (`[0]`, `(0, -1)`), or an empty one (no rank): `rank in ranks` then holds on
        rank 0 only. A value not read (`list(range(world_size))`, a caller's unknown) says no."""
        from ddpcheck.lint.model.conditions import main_rank_literal

        name = dotted(expr)
        if self.scope is None or name is None or name in self._holding:
            return False
        self._holding.add(name)
        try:
            found = False
            for value in self.model.values.of(self.module, expr, self.scope, depth=8):
                node = value.node
                if not isinstance(node, (cst.Tuple, cst.List, cst.Set)):
                    return False
                if not node.elements:
                    continue
                if not main_rank_literal(node):
                    return False
                found = True
            return found
        finally:
            self._holding.discard(name)

    def set_sides(self, expr: cst.BaseExpression, depth: int) -> bool | None:
        """Where a name holds something other than None: True when every value it may hold
        other than None is given under a rank-0 test (`if local_rank == 0: evaluator = KNN()`)
        and every None under its negation (`else: evaluator = None`), so that `evaluator is not
        None` holds on rank 0 only; False for the reverse; None otherwise (an unguarded value, a
        test that is not a whole rank test)."""
        from ddpcheck.lint.model.conditions import selects_main_rank, whole_rank_test

        name = dotted(expr)
        if self.scope is None or name is None or name in self._holding:
            return None
        self._holding.add(name)
        try:
            values = self.model.values.of(self.module, expr, self.scope, depth=8)
            sides: set[bool | None] = set()
            kinds: set[bool] = set()  # None given, something else given
            for value in values:
                if value.node is expr:
                    return None
                resolve = self.model.resolver_for(value.module, value.scope)
                where: bool | None = None
                for guard in value.conditions:
                    side = selects_main_rank(guard.test, resolve, depth)
                    if side is None or guard.negated and not whole_rank_test(guard.test, resolve):
                        continue
                    where = side != guard.negated
                if where is None:
                    return None
                node = value.node
                empty = isinstance(node, cst.Name) and node.value == "None"
                kinds.add(empty)
                sides.add(not where if empty else where)
            return sides.pop() if len(sides) == 1 and len(kinds) == 2 else None
        finally:
            self._holding.discard(name)

    def _literal_flag_side(self, values: list[Value]) -> bool | None:
        """A flag given only `True` / `False` literals, some under a rank guard: `verbose = True`
        then `if rank != 0: verbose = False` (or `quiet = False` then `if rank != 0: quiet =
        True`). True when it holds on rank 0 only, False when on every rank but rank 0, None
        otherwise — a binding under a test that is neither a rank nor a launch-mode test, or an
        unguarded binding that does not come before the guarded ones in the same scope."""
        from ddpcheck.lint.model.conditions import whole_rank_test

        paths = self.model.paths
        partial = False  # a rank test that also asks something else (`rank != 0 and args.quiet`)
        every: list[tuple[Value, bool]] = []
        ranked: dict[str, list[tuple[Value, bool]]] = {"main": [], "other": []}
        for value in values:
            node = value.node
            if not isinstance(node, cst.Name) or node.value not in ("True", "False") or value.at is None:
                return None
            side = "every"
            resolve = self.model.resolver_for(value.module, value.scope)
            for guard in value.conditions:
                kind = paths.kind(value.module, guard, value.scope)
                if kind in ("main", "other", "single"):
                    side = kind
                elif kind != "distributed":
                    return None
                if kind in ("main", "other") and not whole_rank_test(guard.test, resolve):
                    partial = True
            if side == "single":
                continue  # (set for a run without a process group: not this question)
            if side == "every":
                every.append((value, node.value == "True"))
            else:
                ranked[side].append((value, node.value == "True"))
        if not ranked["main"] and not ranked["other"]:
            return None
        if every and partial:
            return None  # the unguarded value may survive on some of the ranks the test names
        for value, _ in every:
            for later, _ in ranked["main"] + ranked["other"]:
                if later.scope is not value.scope or later.at is None or value.at is None \
                        or later.at.tick <= value.at.tick:
                    return None
        fallback = {held for _, held in every}
        on_main = {held for _, held in ranked["main"]} or fallback
        on_other = {held for _, held in ranked["other"]} or fallback
        if on_main == {True} and on_other == {False}:
            return True
        if on_main == {False} and on_other == {True}:
            return False
        return None

    def returned_sides(self, call: cst.Call, depth: int) -> set[bool | None]:
        """What `selects_main_rank` says of what a project function returns (`def primary():
        ... return get_rank() == 0`); a literal True returned only on a single process (after
        `if not dist.is_initialized(): return True`) says nothing. {None} when a value is not a
        test or the call is not followed."""
        from ddpcheck.lint.model.conditions import on_single_process_only, selects_main_rank

        if self.scope is None:
            return {None}
        sides: set[bool | None] = set()
        for value in self.model.values.of(self.module, call, self.scope, depth=8):
            node = value.node
            resolve = self.model.resolver_for(value.module, value.scope)
            if node is call or not isinstance(node, _FLAG_VALUES):
                return {None}
            if isinstance(node, cst.Name) and node.value == "True":
                guards = value.at.guards if value.at is not None else ()
                if on_single_process_only(guards, resolve) is not None or any(
                        _not_built_for_distributed(g, resolve) for g in guards):
                    continue
                return {None}
            if _single_process_only(node, resolve):
                # `return not dist.is_initialized() or dist.get_rank() == 0`: the first operand is
                # what is returned only where the run has no process group.
                continue
            sides.add(selects_main_rank(node, resolve, depth))
            if None in sides:
                return {None}
        return sides or {None}

    def _item_set(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """`params.log_to_screen` of a config object whose item of that name is set on every
        path (`params["log_to_screen"] = rank == 0 and params["log_to_screen"]`): the value of
        the last such item assignment, read as an attribute (config classes that serve their
        items as attributes)."""
        if self.scope is None or not isinstance(expr, cst.Attribute):
            return []
        key = expr.attr.value
        found: list[cst.BaseExpression] = []
        for base in self.model.values.of(self.module, expr.value, self.scope, depth=6):
            if not isinstance(base.node, cst.Call):
                continue
            mains = {id(n) for n in base.module.main_guards}
            for name in base.module.assigned_names(base.node):
                last = [v for k, v, guards, _ in base.scope.updates.get(name, [])
                        if k == key and all(id(g.node) in mains for g in guards)]
                if last:
                    found.append(last[-1])
        return found if len(found) == 1 else []

    def _attribute_tests(self, name: str, depth: int) -> bool | None:
        """`self.log_to_screen = params.log_to_screen and self.world_rank == 0` in a method of the
        class: where every assignment of the attribute in the class's methods is a test and all
        select the same ranks, that side (the value flow reads the operands of `and` apart)."""
        from ddpcheck.lint.model.conditions import selects_main_rank

        owner = self.scope.class_scope if self.scope is not None else None
        info = self.module.classes.get(owner.qualname) if owner is not None else None
        if info is None or not name.startswith("self.") or name.count(".") != 1:
            return None
        sides: set[bool | None] = set()
        for qualname in info.methods.values():
            scope = self.module.function_scopes.get(qualname)
            for bound in scope.assignments.get(name, []) if scope is not None else []:
                if not isinstance(bound, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)):
                    return None
                sides.add(selects_main_rank(bound, self.model.resolver_for(self.module, scope), depth))
        return sides.pop() if len(sides) == 1 else None

    def _held(self, name: str) -> list[cst.BaseExpression]:
        assert self.scope is not None
        from ddpcheck.lint.model.conditions import on_single_process_only

        bindings = self.scope.lookup(name)
        owner = self.scope.owner_of(name)
        points = owner.points.get(name, []) if owner is not None else []
        if len(points) == len(bindings):
            # `val_cond = rank == 0 and due` when distributed, `val_cond = due` otherwise: the
            # single-process arm's value never holds in a distributed job.
            pairs = [(b, p) for b, p in zip(bindings, points) if p is None or on_single_process_only(p.guards, self) is None]
            kept = [b for b, _ in _without_fallback_arm(pairs, self)]
            bindings = kept or bindings
        values = [v for v in bindings if isinstance(v, cst.BaseExpression)]
        if not values or len(values) != len(bindings):
            return []
        tests = (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation, cst.Call, cst.IfExp)
        return values if all(isinstance(v, tests) for v in values) else []

    def bound_to_rank(self, expr: cst.BaseExpression) -> bool:
        if self.scope is None or not isinstance(expr, (cst.Name, cst.Attribute, cst.Call)):
            return False
        from ddpcheck.lint.model.conditions import is_rank_value

        key = f"<call {id(expr)}>"
        if key in self._holding:
            return False  # (a helper whose value is read while it is being read)
        self._holding.add(key)
        try:
            for value in self.model.values.of(self.module, expr, self.scope, depth=9):
                node = value.node
                if isinstance(node, Param):
                    # `process_id = rank` in `def worker(rank, world_size)`: a copy of a
                    # parameter the function's own code calls the rank; and the process index
                    # `mp.spawn` hands its worker first (`def main_worker(worker_idx, args)`).
                    if node.name != dotted(expr) and is_rank_value(cst.Name(node.name), self.model.resolver_for(value.module)):
                        return True
                    if node.index == 0 and any(bound == "spawn" for _, bound in
                                               self.model.graph.callers(Function(value.module, node.function))):
                        return True
                    continue
                if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
                    # `device = rank % torch.cuda.device_count()`: the local rank under another name.
                    node = node.left
                elif node is expr or not isinstance(node, (cst.Call, cst.Subscript)):
                    continue
                if is_rank_value(node, self.model.resolver_for(value.module)):
                    return True
            return False
        finally:
            self._holding.discard(key)


def import_origins(statement: cst.BaseSmallStatement) -> list[str]:
    """The dotted names an `import` or `from ... import` statement imports."""
    if isinstance(statement, cst.Import):
        return [dotted(alias.name) or "" for alias in statement.names]
    if isinstance(statement, cst.ImportFrom) and not isinstance(statement.names, cst.ImportStar):
        module = "." * len(statement.relative) + (dotted(statement.module) or "" if statement.module else "")
        return [join_import(module, dotted(alias.name) or "") for alias in statement.names]
    return []


def _top_statements(body: Sequence[cst.BaseStatement]) -> list[cst.SimpleStatementLine]:
    """The simple statements of a module's top level, and of the `try:` bodies there."""
    found: list[cst.SimpleStatementLine] = []
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            found.append(statement)
        elif isinstance(statement, cst.Try) and isinstance(statement.body, cst.IndentedBlock):
            found += _top_statements(statement.body.body)
    return found


def _single_process_only(node: cst.BaseExpression, resolve: Names) -> bool:
    """A test that holds only where the run is not distributed (`not dist.is_initialized()`,
    `world_size == 1`, `not dist.is_available()`): as a value returned from a rank helper it is
    true on a single process and false on every rank of a distributed run."""
    from ddpcheck.lint.model.conditions import is_distributed_test

    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        inner = node.expression
        if isinstance(inner, cst.Call) and resolve(inner.func) == "torch.distributed.is_available":
            return True
    return is_distributed_test(node, resolve) is False


def _without_fallback_arm(pairs: list[tuple[Binding, Point | None]], resolve: Names) -> list[tuple[Binding, Point | None]]:
    """Drop a literal `True` given in one arm of an `if` whose other arm gives a rank-0 test
    (`if opt.distribution_type == "multi": should_diag = gpu == 0` / `else: should_diag =
    True`): a test the model cannot read that splits the rank test from a plain True is the
    launch mode (or an opt-out of the guard); the rank test is what a distributed run holds.
    Kept where the test is read as "distributed" and True is its distributed arm."""
    from ddpcheck.lint.model.conditions import is_distributed_test, selects_main_rank

    ranked = [p for b, p in pairs if p is not None and isinstance(b, cst.BaseExpression)
              and selects_main_rank(b, resolve, 3) is True]
    if not ranked:
        return pairs
    kept: list[tuple[Binding, Point | None]] = []
    for binding, point in pairs:
        if point is not None and isinstance(binding, cst.Name) and binding.value == "True" and any(
                id(g.node) == id(h.node) and g.negated != h.negated
                and selects_main_rank(g.test, resolve, 3) is None
                and is_distributed_test(g.test, resolve) is None
                for g in point.guards for r in ranked for h in r.guards):
            continue
        kept.append((binding, point))
    return kept


def _not_built_for_distributed(guard: Guard, resolve: Names) -> bool:
    """The arm of `if not dist.is_available():` that runs: torch built without distributed
    support, so a single process."""
    test = guard.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and not guard.negated:
        inner = test.expression
        return isinstance(inner, cst.Call) and resolve(inner.func) == "torch.distributed.is_available"
    return False


def _falsy_left_operands(values: list[Value]) -> set[int]:
    """The leaves (by node id) that come from the left operand of an `and` another leaf was
    chosen through (`save_logs = args.logs and args.logs != "none" and is_master(args)`): the
    value flow reads the operands apart, and such a leaf is the flag's value only where it is
    false, so a test of the flag never holds through it."""
    lefts: list[cst.BaseExpression] = []
    for value in values:
        for arm in value.arms:
            whole = arm.node
            if isinstance(whole, cst.BooleanOperation) and isinstance(whole.operator, cst.And) \
                    and arm.test is whole.left and not arm.negated:
                lefts.append(whole.left)
    if not lefts:
        return set()
    inside = {id(sub) for left in lefts for sub in subexpressions(left)}
    return {id(value.node) for value in values if id(value.node) in inside}


def _demoted_elsewhere(default: Value, values: list[Value], model: Model, depth: int) -> bool:
    """Whether a flag set True with no rank condition (`self.verbose = True`) is set False (or
    None) later in the same scope on every rank but rank 0 (`if dist.get_rank() != 0:
    self.verbose = False`), and nowhere else."""
    from ddpcheck.lint.model.conditions import selects_main_rank, whole_rank_test

    if default.at is None or any(
            selects_main_rank(g.test, model.resolver_for(default.module, default.scope), depth) is not None
            for g in default.conditions):
        return False
    found = False
    for value in values:
        node = value.node
        if value is default or not (isinstance(node, cst.Name) and node.value in ("False", "None")):
            continue
        if value.scope is not default.scope or value.at is None or value.at.tick < default.at.tick:
            return False
        resolve = model.resolver_for(value.module, value.scope)
        sides = {selects_main_rank(g.test, resolve, depth) != g.negated for g in value.conditions
                 if selects_main_rank(g.test, resolve, depth) is not None}
        if any(selects_main_rank(g.test, resolve, depth) is not None and not whole_rank_test(g.test, resolve)
               for g in value.conditions):
            return False  # cleared on some of those ranks only (`rank != 0 and args.quiet`)
        if sides != {False}:
            return False
        found = True
    return found


def _arms_side(arms: tuple[Guard, ...], resolve: Names, depth: int) -> bool | None:
    """What `selects_main_rank` says of the conjunction of the arms a value is chosen under
    (as of `a and b`: one arm that keeps to rank 0 is enough)."""
    from ddpcheck.lint.model.conditions import selects_main_rank

    found: set[bool] = set()
    for guard in arms:
        side = selects_main_rank(guard.test, resolve, depth)
        if side is not None:
            found.add(side != guard.negated)
    return True if True in found else (False if found else None)


_LOOPBACK = re.compile(r"^(?:tcp://)?(?:localhost|127\.0\.0\.1|\[?::1\]?)(?::\d+)?/?$")


def _loopback(expr: cst.BaseExpression) -> bool:
    """A literal loopback address (`"localhost"`, `"127.0.0.1"`, `"tcp://localhost:29500"`)."""
    text = expr.evaluated_value if isinstance(expr, cst.SimpleString) else None
    return isinstance(text, str) and bool(_LOOPBACK.match(text))
