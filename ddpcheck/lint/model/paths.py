"""Path facts: which code runs on every rank, and what the linted file reaches in other modules.

- Guards: an `if` (or early exit, or `a if c else b`) whose test selects rank 0, the other ranks,
  some ranks, or only a non-distributed run. `not args.multiprocessing_distributed or
  args.rank % ngpus == 0` selects rank 0 only on the `mp.spawn` path: in a script torchrun can
  start (it reads LOCAL_RANK/RANK/WORLD_SIZE), it is true on every rank. Rank guards as people
  write them: flags given a rank test through arguments and attributes, the presence of an
  object only rank 0 makes (`if self.writer is not None:`), a rank-0 decorator of the function
  (`@rank_zero_only`, or a project decorator whose wrapper tests the rank), an `if` whose one
  branch sets up the process group (the other is a single-process run).
- The one question: `ranks(site)` — "never", "single", "main", "node", "other", "some", "every" or
  "unknown" — answers for every rule where a call runs; `restricted(site)` is the part its own
  guards decide. A caller whose arguments make a guard of the code false never reaches it.
- Every rank: a call runs on every rank when no such guard is around it, and its function is an
  entry (module level, an `mp.spawn` target, a `main`-like function, a function that sets up the
  process group) or is called on every rank by some caller, across modules.
- Reach: the project functions the linted file calls, directly or through other project
  functions, breadth first within bounds (depth, number of functions). Rules look at their calls
  too, and report there with the chain of calls from the linted file as related locations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol, Sequence

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import (
    Resolve, bounded_rank, contradictory, is_distributed_test, selects_main_rank, vacuous_without_flag, whole_rank_test, widened,
)
from ddpcheck.lint.model.facts import Facts
from ddpcheck.lint.model.graph import CallGraph
from ddpcheck.lint.model.index import bare_names, code_only
from ddpcheck.lint.model.module import CallSite, Guard, ModuleModel, Param, Point, Scope
from ddpcheck.lint.model.options import constant_flag
from ddpcheck.lint.model.project import Project, resolved_path
from ddpcheck.lint.model.resolve import Resolver
from ddpcheck.lint.model.scripts import project_files
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.values import Frame, Value, Values, literal_test
from ddpcheck.lint.model.syntax import argument, children, dotted, is_none, last_name, string_text, subexpressions
from ddpcheck.lint.traverse import NO_STATEMENTS, TOKEN_NODES


class PathsModel(Protocol):
    """What the execution paths ask of the semantic model (semantic.Model)."""

    @property
    def root(self) -> ModuleModel: ...
    @property
    def project(self) -> Project: ...
    @property
    def resolver(self) -> Resolver: ...
    @property
    def graph(self) -> CallGraph: ...
    @property
    def values(self) -> Values: ...
    @property
    def facts(self) -> Facts: ...
    @property
    def reach_complete(self) -> bool: ...
    @property
    def torchrun_path(self) -> bool: ...
    def is_entry_point(self) -> bool: ...
    def project_model(self, path: Path) -> ModuleModel | None: ...
    def qualname(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope | None = None) -> str | None: ...
    def resolver_for(self, module: ModuleModel, scope: Scope | None = None) -> Resolve: ...
    def api(self, site: CallSite) -> str | None: ...


MAX_FUNCTIONS = 300
MAX_HOPS = 5
# Functions nobody in the file calls that are still run by every rank (mp.spawn targets, main).
# Decorators of libraries that run the function on the main process only (Lightning, mmcv,
# Accelerate, detectron2-style helpers).
_RANK_ZERO_DECORATOR = re.compile(
    r"^(rank_?(0|zero)_only|master_only|main_process_only|main_only|on_main_process|on_local_main_process"
    r"|on_rank_?(0|zero)|only_on_(main|master)(_process)?)$"
)
# Code that calls the file's functions by name: `fire.Fire()`, `globals()[args.func]`.
_BY_NAME = re.compile(r"\bFire\(\s*\)|\b(globals|locals|vars)\(\s*\)\s*(\[|\.get\b)")
_ENTRY_NAME = re.compile(r"^(main|main_worker|worker|run|train|fit|.*_main|main_.*|.*_worker)$")
_MAX_LOOP_CALLERS = 8  # callers followed per function when looking for a loop around it


class Paths:
    def __init__(self, model: PathsModel) -> None:
        self.model = model
        self.complete = False
        self._edges: dict[Function, list[tuple[CallSite, str]]] = {}
        self._parent: dict[Function, CallSite] = {}
        self._reached: list[Function] = []
        self._kinds: dict[int, str | None] = {}
        self._nesting = 0  # kind() calls in progress (a test's reading may read other tests)
        self._decorated: dict[tuple[int, str], Guard | None] = {}
        self._ranks: dict[int, str] = {}
        self._every: dict[tuple[int, str], list[CallSite] | None] = {}
        self._sites: list[CallSite] | None = None
        self._uncalled: dict[tuple[int, str], bool] = {}
        self._imported: bool | None = None

    # --- reach -------------------------------------------------------------------------------
    def compute(self) -> None:
        if self.complete:
            return
        root = self.model.root
        todo: list[tuple[ModuleModel, str, int]] = [(root, "<module>", 0)]
        todo += [(root, q, 0) for q in root.functions]
        seen: set[tuple[int, str]] = {(id(root), q) for _, q, _ in todo}
        while todo:
            module, qualname, hops = todo.pop(0)
            for site in module.calls_in(qualname):
                if self._builds_a_module(site):
                    continue
                for callee, bound in self.model.graph.targets(site):
                    if callee.module is root:
                        if module is not root and (bound == "method" or _calls_parameter(site)):
                            # A base class elsewhere calling `self.m()` that a class of the
                            # linted file overrides, or a helper calling the function the file
                            # handed it (`multi_proc_run(n, fun=train)`, then `fun(*args)` in the
                            # spawned worker): a caller of the file's function.
                            self._edges.setdefault(callee, []).append((site, bound))
                        continue
                    self._edges.setdefault(callee, []).append((site, bound))
                    key = (id(callee.module), callee.qualname)
                    # The worker `mp.spawn` (or a Process) starts is each process's own entry:
                    # the calls that led to the start do not count against the depth it runs at.
                    started = bound in ("spawn", "process")
                    if key in seen or hops >= MAX_HOPS and not started or len(self._reached) >= MAX_FUNCTIONS:
                        continue
                    seen.add(key)
                    self._reached.append(callee)
                    self._parent[callee] = site
                    todo.append((callee.module, callee.qualname, min(hops, MAX_HOPS - 1) if started else hops + 1))
            if module is not root and hops < MAX_HOPS:
                # A closure the function makes and returns (`def make_hook(): def hook(state,
                # bucket): ...; return hook`): whoever called the factory runs it, or hands it
                # to what does (a comm hook, a scheduler's lambda, a collate function).
                for value in module.returns.get(qualname, []):
                    nested = f"{qualname}.{value.value}" if isinstance(value, cst.Name) else None
                    key = (id(module), nested or "")
                    if nested is None or nested not in module.functions or key in seen \
                            or len(self._reached) >= MAX_FUNCTIONS:
                        continue
                    closure = Function(module, nested)
                    parent = self._parent.get(Function(module, qualname))
                    seen.add(key)
                    self._reached.append(closure)
                    if parent is not None:
                        self._parent[closure] = parent
                    todo.append((module, nested, hops + 1))
        self.complete = True

    def _builds_a_module(self, site: CallSite) -> bool:
        """`Net(...)` for a project subclass of `nn.Module`: building the network is not DDP
        work, and its modules (often the largest of a project) need not be read for it."""
        target = site.target
        return target is not None and target.kind == "class" and target.external is None \
            and self.model.graph.is_subclass(target, api.MODULE_BASE)

    def edges_into(self, function: Function) -> list[tuple[CallSite, str]]:
        return self._edges.get(function, [])

    def reached(self) -> list[Function]:
        """Project functions outside the linted file that it runs (breadth first)."""
        self.compute()
        return self._reached

    def sites(self) -> list[CallSite]:
        """Every call of the linted file, then the calls of the functions it reaches elsewhere."""
        if self._sites is None:
            found = list(self.model.root.calls)
            for function in self.reached():
                found += function.module.calls_in(function.qualname)
            self._sites = found
        return self._sites

    def modules(self) -> list[ModuleModel]:
        """The linted module and the project modules whose functions it reaches."""
        return list({id(m): m for m in [self.model.root, *(f.module for f in self.reached())]}.values())

    def chain(self, site: CallSite) -> list[CallSite]:
        """The calls that lead from the linted file to `site` (outermost first), when `site` is
        in a function it reaches in another module; [] for the file's own calls."""
        out: list[CallSite] = []
        function = self.function_of(site)
        while function is not None and function.module is not self.model.root and len(out) < MAX_HOPS + 2:
            parent = self._parent.get(function)
            if parent is None:
                break
            out.append(parent)
            function = self.function_of(parent)
        return list(reversed(out))

    def looping_call(self, function: Function, depth: int = 3) -> CallSite | None:
        """The call that runs `function` over and over: a live call of it inside a loop, or, for
        a call with no loop in its own function, the same for the function it sits in, up to
        `depth` callers. `def train_epoch(self): for x, y in self.loader: ...` run from
        `for epoch in range(n): self.train_epoch()`: each pass of that loop iterates the loader
        again. A caller the run goes through comes before one in a function of another module
        that the run never reaches (a trainer's own `fit()` loop the script does not use). None
        when no known caller loops."""
        seen: set[tuple[int, str]] = set()
        frontier = [function]
        fallback: CallSite | None = None
        for _ in range(depth):
            above: list[Function] = []
            for current in frontier:
                key = (id(current.module), current.qualname)
                if key in seen:
                    continue
                seen.add(key)
                for call, _ in self.model.graph.callers(current)[:_MAX_LOOP_CALLERS]:
                    if self.dead(call):
                        continue
                    if call.loops:
                        if self._runs(call):
                            return call
                        fallback = fallback or call
                        continue
                    outer = self.function_of(call)
                    if outer is not None:
                        above.append(outer)
            frontier = above
        return fallback

    def _runs(self, call: CallSite) -> bool:
        """`call` is in the linted file, at a module's top level, or in a function the run reaches."""
        function = self.function_of(call)
        if function is None or call.module is self.model.root:
            return True
        return any(f.module is function.module and f.qualname == function.qualname for f in self.reached())

    @staticmethod
    def function_of(site: CallSite) -> Function | None:
        scope = site.scope.function
        return Function(site.module, scope.qualname) if scope is not None else None

    # --- guards ------------------------------------------------------------------------------
    def kind(self, module: ModuleModel, guard: Guard, scope: Scope | None = None) -> str | None:
        """What the guard's test selects: "main" (rank 0), "other" (the ranks but 0), "some" (a
        part of the ranks not named: `_some_ranks`), "single"
        (a non-distributed run only), "distributed", or None — with its branch (negated) taken
        into account. "main" on the mp.spawn path only is "flag". Rank tests are read as people
        write them (conditions.py), through flags that hold one (`is_master = rank == 0` passed
        to a trainer), and as the presence of an object only rank 0 makes (`if self.writer is
        not None:` after `writer = SummaryWriter() if rank == 0 else None`)."""
        key = id(guard.test) * 2 + guard.negated
        if key in self._kinds:
            return self._kinds[key]
        if self._nesting >= 3:
            return None  # asked deep inside the reading of other tests: not known here
        self._kinds[key] = None  # (a test read again while it is being read: not known)
        self._nesting += 1
        try:
            kind = self._kind(module, guard, scope)
        finally:
            self._nesting -= 1
        if self.model.values.whole:
            self._kinds[key] = kind
        else:
            del self._kinds[key]
        return kind

    def _kind(self, module: ModuleModel, guard: Guard, scope: Scope | None) -> str | None:
        resolve = self.model.resolver_for(module, scope)
        kind: str | None = None
        side = selects_main_rank(guard.test, resolve)
        if side is None and scope is not None:
            side = self._presence_side(module, guard.test, scope, guard.node)
        if side is None and guard.negated and _false_past_rank_zero(guard.test, resolve):
            side = False  # read as `rank != 0` in its `else` (the code after `if ...: return`)
        if side is not None and widened(guard.test, guard.negated, resolve):
            return None  # the else of `if rank == 0 and x:` runs on every rank where x is false
        if side is not None:
            main = side != guard.negated
            kind = "main" if main else "other"
            flag = vacuous_without_flag(guard.test) if main else None
            if flag is not None and not self._flag_starts_group(module, flag):
                kind = "flag"
        else:
            distributed = is_distributed_test(guard.test, resolve)
            if distributed is None:
                distributed = self._initialises_on(module, guard.node)
            if distributed is None and scope is not None:
                distributed = self._mode_flag(module, guard.test, scope)
            if distributed is None and not guard.negated and self._launch_off(module, guard.test):
                distributed = False
            if distributed is not None:
                kind = "distributed" if distributed != guard.negated else "single"
            elif self._some_ranks(module, guard, scope, resolve):
                kind = "some"
        return kind

    def _some_ranks(self, module: ModuleModel, guard: Guard, scope: Scope | None, resolve: Resolve) -> bool:
        """The branch runs on a part of the ranks that no test here names as rank 0 or as the
        others: the ranks from a configured bound up (`if rank >= args.num_gpus:`, the `else` of
        `if local_rank < args.num_gpus:` in a job that runs one extra host process), or the
        ranks whose piece of a scatter passes a test (`dist.scatter_object_list(mine, states,
        src=n)`, then `if mine[0] == 2:`: each rank received its own value). Not every rank, and
        not known which: unknown. (The other branch of a bound, `rank < args.num_gpus`, holds on
        rank 0 and may hold on every rank: not a restriction.)"""
        side = bounded_rank(guard.test, resolve)
        if side is not None:
            return side != guard.negated
        if scope is None:
            return False
        names = {n.value for n in subexpressions(guard.test) if isinstance(n, cst.Name)}
        if not names:
            return False
        for call in module.calls_in(scope.qualname):
            if self.model.api(call) in api.SCATTERS:
                out = call.arg("scatter_object_output_list", 0) if self.model.api(call) == api.SCATTER_OBJECT_LIST \
                    else call.arg("tensor", 0)
                if isinstance(out, cst.Name) and out.value in names:
                    return True
        return False

    def _presence_side(self, module: ModuleModel, test: cst.BaseExpression, scope: Scope,
                       own: cst.CSTNode | None = None) -> bool | None:
        """True when `test` holds on rank 0 only because it asks whether an object exists that
        only rank 0 makes (`if writer is not None:`, `if self.logger:`, `if not logger: return`,
        and such a test `and` another); False for its negation; None otherwise. `own` is the
        `if` whose test this is."""
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return True if self._presence_side(module, test.left, scope, own) is True \
                or self._presence_side(module, test.right, scope, own) is True else None
        present = _presence(test)
        if present is None:
            return None
        expr, when_present = present
        return when_present if self.only_on_main(module, expr, scope, own=own) else None

    def only_on_main(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope,
                     at: Point | None = None, own: cst.CSTNode | None = None) -> bool:
        """Whether the object `expr` holds exists on rank 0 only, None on the other ranks: every
        value but None is made under a rank-0 condition (`SummaryWriter(...) if rank == 0 else
        None`, `if is_main: self.logger = Logger()`), or the other ranks set it to None or to a
        do-nothing stand-in (`if rank != 0: logger = None`, `else: self.logger = NoOp()`). Asked for the test of the `if` `own`, the values its own branch
        assigns are left out where no loop brings them back to the test: they are made after
        it (`if writer is None: writer = SummaryWriter() if rank == 0 else None`)."""
        nones = made = 0
        every = False
        for value in self.model.values.of(module, expr, scope, at=at, depth=8):
            if own is not None and value.at is not None and not value.at.loops \
                    and any(g.node is own for g in value.at.guards):
                continue
            kinds = {self.kind(value.module, g, value.scope) for g in value.conditions}
            if is_none(value.node) or self._does_nothing(value):
                if "other" in kinds:
                    return True  # (whatever the order the values come in)
                nones += 1
            elif "main" in kinds:
                made += 1
            else:
                every = True
        return not every and bool(nones and made)

    def _does_nothing(self, value: Value) -> bool:
        """`NoOp()`: an instance of a project class made to stand in for an object the other
        ranks do not get, whose every method does nothing (`pass`, `return`, a docstring) or whose
        `__getattr__` hands back such a function for any name."""
        if not isinstance(value.node, cst.Call):
            return False
        found = self.model.graph.instance_of(Value(value.module, value.node, value.scope, value.frame, value.at))
        if found is None:
            return False
        module, info = found
        if info.bases and any(dotted(b) != "object" for b in info.bases):
            return False
        methods = {name: module.functions[q] for name, q in info.methods.items() if q in module.functions}
        getter = methods.get("__getattr__")
        if getter is not None:
            inner = [s for s in getter.body.body if isinstance(s, cst.FunctionDef)]
            returned = [e.value for s in getter.body.body if isinstance(s, cst.SimpleStatementLine)
                        for e in s.body if isinstance(e, cst.Return)]
            return any(_empty(f) for f in inner) and all(
                isinstance(r, cst.Name) and any(f.name.value == r.value and _empty(f) for f in inner)
                for r in returned) or any(isinstance(r, cst.Lambda) and is_none(r.body) for r in returned)
        others = [f for name, f in methods.items() if name != "__init__"]
        return bool(others) and all(_empty(f) for f in others)

    def _mode_flag(self, module: ModuleModel, test: cst.BaseExpression, scope: Scope) -> bool | None:
        """Whether `test` reads a flag that records the launch mode under a name of its own:
        True when it is set `True` only where the run is distributed and `False` only where it
        is not (`if world_size > 1: setup(...); parallel = True` / `else: parallel = False`),
        False the other way round, None when any of its bindings says otherwise (set under a
        test of another kind, set unguarded, or to anything but a literal)."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._mode_flag(module, test.expression, scope)
            return None if inner is None else not inner
        if not isinstance(test, (cst.Name, cst.Attribute)) or dotted(test) is None:
            return None
        sides: set[bool] = set()
        defaults: list[tuple[Point, bool]] = []
        guarded: list[Point] = []
        for value in self.model.values.of(module, test, scope, depth=8):
            node = value.node
            if not (isinstance(node, cst.Name) and node.value in ("True", "False")) or value.at is None:
                return None
            held = node.value == "True"
            if not value.conditions:
                if value.scope is not scope:
                    return None
                defaults.append((value.at, held))
                continue
            kinds = {self.kind(value.module, g, value.scope) for g in value.conditions}
            if len(kinds) != 1 or not kinds <= {"distributed", "single"}:
                return None
            sides.add(held == (kinds == {"distributed"}))
            guarded.append(value.at)
        if len(sides) != 1:
            return None
        side = sides.pop()
        # A default set before the branch that records the mode (`parallel = False`, then `if
        # world_size > 1: ... parallel = True`) must say the other mode.
        for at, held in defaults:
            if any(later.tick <= at.tick for later in guarded) or held == side:
                return None
        return side

    def _launch_off(self, module: ModuleModel, test: cst.BaseExpression) -> bool:
        """`test` is a flag the file's launch requires to be off (`cfg.debug` where the workers
        start only under `if world_size > 1 and not cfg.debug: mp.spawn(...)`, or the process
        group is set up only under `if args.distributed and not args.debug:`): where it holds,
        the run is a single process. A flag also tested true around a launch, or a spawn in a
        file torchrun can start as well (it bypasses the spawn's test), says nothing."""
        name = dotted(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
        if name is None:
            return False
        flags: tuple[set[str], set[str]] | None = module.memo.get("launch_off")
        if flags is None:
            off: set[str] = set()
            on: set[str] = set()
            mains = {id(n) for n in module.main_guards}
            for site in module.calls:
                spawn = site.qualname in api.SPAWN
                if not (spawn or site.qualname == api.INIT_PROCESS_GROUP):
                    continue
                if spawn and self.model.torchrun_path:
                    on.add("*")
                for g in site.guards:
                    if id(g.node) in mains:
                        continue
                    for part in _conjuncts(g.test) if not g.negated else [g.test]:
                        if isinstance(part, cst.UnaryOperation) and isinstance(part.operator, cst.Not):
                            flag = dotted(part.expression)
                            if flag is not None:
                                (on if g.negated else off).add(flag)
                        else:
                            flag = dotted(part)
                            if flag is not None:
                                (off if g.negated else on).add(flag)
            flags = (off, on)
            module.memo["launch_off"] = flags
        off, on = flags
        return name in off and name not in on and "*" not in on

    def _flag_starts_group(self, module: ModuleModel, flag: str) -> bool:
        """Whether the launch-mode flag `flag` (a last name) is the only way this file's run sets up
        the process group: every set-up here (`init_process_group`, or a call that reaches it)
        runs under a test that requires it (`if args.multiprocessing_distributed: ... init`). Then
        a run without the flag is a single process, and `not <flag> or rank == 0` is a rank-0
        test on every launch path, not only on the spawned one."""
        memo: dict[str, bool] | None = module.memo.get("flag_starts_group")
        if memo is None:
            memo = module.memo["flag_starts_group"] = {}
        if flag in memo:
            return memo[flag]
        memo[flag] = False  # (asked again while it is answered: not known)
        mains = {id(n) for n in module.main_guards}
        found = False
        for site in module.calls:
            if site.qualname != api.INIT_PROCESS_GROUP:
                # A call into another module that sets the group up counts as a set-up here; a
                # function of this file (`main()` under the `__main__` test) is read at its own
                # set-up call instead.
                if site.target is None or "init_process_group" not in self.model.facts.of_call(site):
                    continue
                callees = self.model.graph.targets(site)
                if callees and all(f.module is module for f, _ in callees):
                    continue
            found = True
            required = any(
                last_name(part) == flag
                for g in site.guards if id(g.node) not in mains and not g.negated
                for part in _conjuncts(g.test) if isinstance(part, (cst.Name, cst.Attribute)))
            if not required:
                return False
        memo[flag] = found
        return found

    def _initialises_on(self, module: ModuleModel, node: cst.CSTNode) -> bool | None:
        """Whether the `if` `node` is the "are we distributed?" test of its code: True when its
        branch sets up the process group and its other branch does not (`if
        torch.cuda.device_count() > 1: dist.init_process_group(...)` / `else:` a single-process
        run), False the other way round, None otherwise."""
        memo: dict[int, set[bool]] | None = module.memo.get("init_arms")
        if memo is None:
            module.memo["init_arms"] = {}  # (asked again while it is filled: not known)
            memo = {}
            picks: dict[str, set[str]] = {}  # `args.device == "cpu"` around the set-up: "args.device" → {"cpu"}
            mains = {id(n) for n in module.main_guards}
            for site in module.calls:
                if site.guards and (site.qualname == api.INIT_PROCESS_GROUP or (
                        site.target is not None and "init_process_group" in self.model.facts.of_call(site))):
                    for g in site.guards:
                        if id(g.node) in mains or isinstance(g.node, cst.If) and g.negated and g.node.orelse is None:
                            continue  # `if __name__ == "__main__":`, an early exit (`if args.eval: return`)
                        memo.setdefault(id(g.node), set()).add(not g.negated)
                        picked = _picked_constant(g.test)
                        if picked is not None and not g.negated:
                            picks.setdefault(picked[0], set()).add(picked[1])
            module.memo["init_arms"] = memo
            module.memo["init_picks"] = picks
        arms = memo.get(id(node))
        if arms is None:
            # Another test of the same setting for another value (`if args.device == "cuda":`
            # where the group is set up only under `if args.device == "cpu":`): its branch runs
            # without one.
            picked = _picked_constant(node.test) if isinstance(node, cst.If) else None
            chosen = module.memo.get("init_picks", {}).get(picked[0]) if picked is not None else None
            if chosen and picked is not None and picked[1] not in chosen:
                return False
            if chosen and picked is not None and chosen == {picked[1]}:
                # The same test of the same setting as the set-up's (`if args.parallel == "DDP":`
                # again further down, around the wrap or the final evaluation): its branch is the
                # distributed run's, its `else` the single process's.
                return True
            return None
        if len(arms) != 1:
            return None
        return next(iter(arms))

    def rank_guard(self, site: CallSite, flags_count: bool = True) -> Guard | None:
        """The innermost guard that keeps `site` off some ranks. A guard that is a rank guard on
        the mp.spawn path only counts unless torchrun can start the script (`flags_count=False`
        asks about the torchrun path)."""
        for guard in reversed(self.guards_of(site)):
            kind = self.kind(site.module, guard, site.scope)
            if kind in ("main", "other"):
                return guard
            if kind == "flag" and (flags_count or not self.model.torchrun_path):
                return guard
        return None

    def rank_guards_up(self, site: CallSite, depth: int = 2) -> list[tuple[CallSite, Guard]] | None:
        """The rank guards that keep `site` off some ranks, each with the call it guards: its own
        innermost one, or, where it has none, those of every call of the run that reaches its
        function (`if rank == 0: self._clean_up()` around a bare teardown), followed `depth`
        calls up. None when some way there is open to every rank, or the function has no known
        caller."""
        guard = self.rank_guard(site)
        if guard is not None:
            return [(site, guard)]
        function = self.function_of(site)
        if function is None or depth <= 0:
            return None
        callers = self._run_callers(function)
        if not callers:
            return None
        found: list[tuple[CallSite, Guard]] = []
        for caller in callers:
            above = self.rank_guards_up(caller, depth - 1)
            if above is None:
                return None
            found += above
        return found

    def single_up(self, site: CallSite, depth: int = 3) -> bool:
        """`site` runs only in a non-distributed run: its own guards say so, or every call of the
        run that reaches its function does, followed `depth` calls up (`if args.distributed:
        train_ddp(cfg)` / `else: train(cfg)`, where `train` builds its own loader). False where
        some way there is open to a distributed run, or the function has no known caller."""
        if self.single_only(site) is not None:
            return True
        function = self.function_of(site)
        if function is None or depth <= 0:
            return False
        callers = self._run_callers(function)
        return bool(callers) and all(self.single_up(caller, depth - 1) for caller in callers)

    def engine_run(self, site: CallSite) -> bool:
        """`site` is in a function that hands its training to another engine
        (`model_engine, optimizer, loader, _ = deepspeed.initialize(...)`): the loaders, backward
        passes and steps there are that engine's, not DDP's."""
        # (Not a site the engine's set-up can never run beside: the `else` of `if backend ==
        # "deepspeed":` when the engine is built under `if backend == "deepspeed" and ...:`.)
        return any(self.model.api(c) in api.ENGINE_BUILDERS and not contradictory(c.guards, site.guards)
                   for c in site.module.calls_in(site.scope.qualname))

    def on_error_only(self, site: CallSite, depth: int = 3) -> bool:
        """`site` runs only when something failed: it sits in an `except` handler, or in a
        project function that every call of the run that reaches it makes from one (`except
        Exception: cleanup()`), followed `depth` calls up. A function with no known caller is
        not."""
        if id(site.node) in handler_calls(site.module):
            return True
        function = self.function_of(site)
        if function is None or depth <= 0:
            return False
        callers = self._run_callers(function)
        if not callers:
            return self._signal_handler_only(function)
        return all(self.on_error_only(c, depth - 1) for c in callers)

    def launcher_only(self, site: CallSite, depth: int = 3) -> bool:
        """`site` runs only in the process that starts the workers: beside the `mp.spawn(...)`
        in the same function or block (`mp.spawn(main, ...)` then `cleanup()` in the `__main__`
        block), or in a project function that every call of the run makes from there, followed
        `depth` calls up. The workers' process groups are not that process's."""
        if self.model.api(site) in api.SPAWN:
            return False  # the function handed to `mp.spawn` runs in the workers
        function = self.function_of(site)
        if any(self.model.api(c) in api.SPAWN for c in site.module.calls_in(site.scope.qualname)):
            # Not a function the workers enter as well (`def main(..., n_devices=None):` that
            # spawns `_main_mp`, which calls `main(**kwargs)` again in every worker).
            return function is None or not self._entered_by_workers(function)
        if function is None or depth <= 0:
            return False
        callers = self._run_callers(function)
        return bool(callers) and all(self.launcher_only(c, depth - 1) for c in callers)

    def outside_workers(self, site: CallSite) -> bool:
        """`site` runs in the starting process of a script that makes its own workers and sets
        the process group up only in them: torchrun cannot start it, every start is an
        `mp.spawn` of a known project function, every `init_process_group` of the run sits in
        a function the workers enter, and no worker enters `site`'s function (followed six
        calls up). That process has no process group (a mode of the script that inspects the
        data or the model, `elif args.mode == "check": check(args)`): it is a single process."""
        model = self.model
        function = self.function_of(site)
        if function is None or model.torchrun_path:
            return False
        memo: bool | None = model.root.memo.get("group_only_in_workers")
        if memo is None:
            sites = self.sites()
            starts = [c for c in sites if model.api(c) in api.PROCESS_STARTERS]
            spawned = all(model.api(c) in api.SPAWN and any(b == "spawn" for _, b in model.graph.targets(c))
                          for c in starts)
            inits = [c for c in sites if model.api(c) == api.INIT_PROCESS_GROUP]
            memo = bool(starts) and spawned and bool(inits) and all(
                (f := self.function_of(c)) is not None and self._entered_by_workers(f, 6) for c in inits)
            model.root.memo["group_only_in_workers"] = memo
        return memo and not self._entered_by_workers(function, 6)

    def _entered_by_workers(self, function: Function, depth: int = 3) -> bool:
        """`function` is a worker `mp.spawn` starts, or one a worker calls (followed `depth`
        calls up)."""
        graph = self.model.graph
        workers = [f for c in self.sites() if self.model.api(c) in api.SPAWN
                   for f, bound in graph.targets(c) if bound == "spawn"]
        frontier = [function]
        for _ in range(depth):
            if any(f == w for f in frontier for w in workers):
                return True
            frontier = [f for c in frontier for call in self._run_callers(c)
                        if (f := self.function_of(call)) is not None]
        return any(f == w for f in frontier for w in workers)

    def _run_callers(self, function: Function) -> list[CallSite]:
        """The calls of the run (`sites()`) that may call `function`."""
        graph = self.model.graph
        return [c for c in self.sites() if any(f == function for f, _ in graph.targets(c))]

    def _signal_handler_only(self, function: Function) -> bool:
        """A function nothing calls that is installed as a signal handler (`signal.signal(
        signal.SIGTERM, handler)`): it runs only when the process is interrupted."""
        module = function.module
        installed = any(
            self.model.api(c) == "signal.signal" and len(c.node.args) >= 2
            and dotted(c.node.args[1].value) in (function.name, f"self.{function.name}")
            for c in module.calls)
        if not installed:
            return False
        called = re.findall(rf"(?<![\w.]){re.escape(function.name)}\s*\(|\bself\.{re.escape(function.name)}\s*\(",
                            code_only(module.source))
        return len(called) == 1  # its own `def` only

    def main_only(self, site: CallSite) -> Guard | None:
        """The innermost guard that restricts `site` to rank 0 on every launch path."""
        for guard in reversed(self.guards_of(site)):
            kind = self.kind(site.module, guard, site.scope)
            if kind == "main" or (kind == "flag" and not self.model.torchrun_path):
                return guard
        return None

    def guards_of(self, site: CallSite) -> tuple[Guard, ...]:
        """The guards around `site`, outermost first: a rank-0 decorator of its function
        (`@rank_zero_only`), then its own."""
        function = self.function_of(site)
        decorator = self.decorator_guard(function) if function is not None else None
        return (decorator, *site.guards) if decorator is not None else site.guards

    def decorator_guard(self, function: Function) -> Guard | None:
        """A decorator that runs `function` on rank 0 only, as a guard (its test is the decorator
        expression): one of the known ones by name (`@rank_zero_only`, `@master_only`,
        `@accelerator.on_main_process`), or a project decorator whose wrapper calls the function
        it wraps only under a rank-0 test."""
        key = (id(function.module), function.qualname)
        if key in self._decorated:
            return self._decorated[key]
        self._decorated[key] = None
        found: Guard | None = None
        for expr in function.module.decorators.get(function.qualname, ()):
            if isinstance(expr, cst.Call):
                continue  # a decorator factory: what it makes is not read
            if self._runs_on_rank_zero(function.module, expr, function.scope.parent or function.module.module_scope):
                found = Guard(expr, False, expr)
                self._kinds[id(expr) * 2] = "main"
                break
        if self.model.values.whole:
            self._decorated[key] = found
        else:
            del self._decorated[key]
        return found

    def _runs_on_rank_zero(self, module: ModuleModel, expr: cst.BaseExpression, scope: Scope) -> bool:
        name = dotted(expr)
        if name is None:
            return False
        target = self.model.resolver.name(module, name, scope)
        decorator: Function | None = None
        if target is not None and target.external is None and target.kind == "function" and target.path is not None:
            where = self.model.project_model(target.path)
            if where is not None and target.name in where.functions:
                decorator = Function(where, target.name)
        if decorator is None:
            return bool(_RANK_ZERO_DECORATOR.match(name.rsplit(".", 1)[-1]))
        params = decorator.params()
        if not params or params[0].star:
            return False
        wrapped = params[0].name
        prefix = decorator.qualname + "."
        calls = [c for q in decorator.module.functions if q.startswith(prefix)
                 for c in decorator.module.calls_in(q) if c.dotted == wrapped]
        return bool(calls) and all(self.main_only(c) is not None for c in calls)

    def single_only(self, site: CallSite) -> Guard | None:
        """The innermost guard that keeps `site` to non-distributed runs."""
        for guard in reversed(site.guards):
            if self.kind(site.module, guard, site.scope) == "single":
                return guard
        return None

    def unwrapped_only(self, site: CallSite) -> Guard | None:
        """The innermost guard that holds only for a model that is not wrapped in DDP
        (the else of `if isinstance(model, DDP):`, `m.state_dict() if ... else ...`)."""
        for guard in reversed(site.guards):
            wrapped = self.model.values.wrapped_test(site.module, guard.test)
            if wrapped is not None and wrapped == guard.negated:
                return guard
        return None

    def never(self, site: CallSite, frame: Frame | None = None) -> Guard | None:
        """A guard that no known run takes: a flag the command line cannot change, or a test of a
        parameter (or a name) that every caller and the default leave False or None (`if
        progress:` with `progress=False` by default and no caller passing it). With `frame`, the
        run of one call of `site`'s function (`save_or_load(cfg)` never takes `if model is not
        None:`)."""
        for i, guard in enumerate(site.guards):
            # The test is read where the `if` is: what its own branch assigns before `site`
            # (`skip = True` then a print under `if not skip:` further out) has not happened yet,
            # nor has what the code between an early exit and `site` assigns (`if GROUP is not
            # None: raise` at the top of a worker, `GROUP = new_group(...)` further down).
            tick = min(site.tick, site.module.if_ticks.get(id(guard.node), site.tick))
            at = Point(tick, site.loops, site.guards[:i])
            fixed = self.model.values.outcome(site.module, guard.test, site.scope, frame, at, False)
            if fixed is not None and fixed == guard.negated:
                return guard
        return None

    def _dead_from(self, site: CallSite, function: Function, call: CallSite, bound: str) -> bool:
        """`call` of `function` never reaches `site` (in it): its arguments make a guard of
        `site` false (`evaluate(model, loader)` and `if save:` with `save=False` by default)."""
        if not _reads_names(site):
            return False
        return self.never(site, Frame(function, call, None, bound)) is not None

    # --- the one question: which ranks run this ---------------------------------------------------
    def ranks(self, site: CallSite) -> str:
        """Which ranks of a distributed job run `site` (the torchrun path counts: a guard that
        holds on every rank of a torchrun job does not restrict it):

        - "never": no run takes it (a branch its callers' arguments or defaults make dead, a
          helper module's self-test);
        - "single": only a non-distributed run (`if not args.distributed:`);
        - "main": rank 0 only (`if rank == 0:`, a rank-0 decorator, an object only rank 0 has);
          "node": the local rank 0 of each node (`if args.local_rank == 0:`);
        - "other": every rank but rank 0;
        - "some": a part of the ranks that no test names (the ranks from a configured bound up,
          `if local_rank >= args.num_gpus:`; the ranks whose scattered value passes a test);
        - "every": every rank, along a chain of calls from an entry point (`every_rank`);
        - "unknown": none of these is known (a function nobody known calls).

        Rules ask this one question; `every_rank` gives the chain for reports."""
        key = id(site.node)
        found = self._ranks.get(key)
        if found is None:
            found = self._ranks_of(site)
            if self.model.values.whole:
                self._ranks[key] = found
        return found

    def _ranks_of(self, site: CallSite) -> str:
        own = self.restricted(site)
        if own is not None:
            return own
        return "every" if self.every_rank(site) is not None else "unknown"

    def restricted(self, site: CallSite) -> str | None:
        """What the code around `site` itself (its guards, its function's decorators, its
        receiver) restricts it to: "never", "single", "main", "node", "other", "some" (see `ranks`), or
        None when nothing there does (its callers may)."""
        if self.never(site) is not None or self.dead(site):
            return "never"
        if self.single_only(site) is not None:
            return "single"
        guard = self.main_only(site)
        if guard is not None or self.receiver_only_on_main(site):
            local = guard is not None and _local_rank_test(guard.test, self.model.resolver_for(site.module, site.scope))
            return "node" if local else "main"
        guard = self.rank_guard(site, False)
        if guard is not None:
            return "main" if self.kind(site.module, guard, site.scope) in ("main", "flag") else "other"
        if self.some_only(site) is not None:
            return "some"
        return None

    def some_only(self, site: CallSite) -> Guard | None:
        """The innermost guard that keeps `site` to a part of the ranks not named (`kind` "some":
        the ranks from a configured bound up, the ranks whose scattered value passes a test)."""
        for guard in reversed(site.guards):
            if self.kind(site.module, guard, site.scope) == "some":
                return guard
        return None

    def set_by_rank(self, module: ModuleModel, scope: Scope, name: str, at: Point | None = None,
                    flags: bool = True, items: bool = False) -> tuple[Guard, bool] | None:
        """A binding of the local `name` (reaching `at`, or any when `at` is None) made under a
        rank guard, whose value no binding made on every rank gives as well (`n = 0`, then `if
        rank == 0: n = len(keys)`; not `epochs = opt.epochs` set again under `if rank == 0:`):
        that guard, and whether a binding made on every rank reaches too. `flags=False` leaves
        out guards that keep code off some ranks on the mp.spawn path only. `items=True` asks
        only what iterating the name yields: a progress bar over a value every rank has
        (`loop = loader`, then `if rank == 0: loop = tqdm(loader)`) yields the same items."""
        if at is not None:
            pairs = self.model.values.reaching(scope, name, at)
        else:
            pairs = list(zip(scope.assignments.get(name, []), scope.points.get(name, [])))
        everywhere = [(b, p) for b, p in pairs if p is not None and not self._ranked(module, scope, p, flags)]
        found: Guard | None = None
        for binding, point in pairs:
            if point is None:
                continue
            guard = self._ranked(module, scope, point, flags)
            if guard is None:
                continue
            if any(self.model.values.same_value(module, scope, binding, point, b, p) for b, p in everywhere):
                continue
            inner = self._progress_over(module, binding, scope) if items else None
            if inner is not None and any(self.model.values.same_value(module, scope, inner, point, b, p)
                                         for b, p in everywhere):
                continue
            if inner is not None and self._wraps_own_value(scope, name, inner, point, everywhere):
                continue
            if found is None or (self.kind(module, guard, scope) == "main"
                                 and self.kind(module, found, scope) != "main"):
                found = guard  # (a rank-0 binding first)
        return (found, bool(everywhere)) if found is not None else None

    def _progress_over(self, module: ModuleModel, binding: object, scope: Scope) -> cst.BaseExpression | None:
        """The iterable a progress bar is made over (`tqdm(loader, desc=...)`): iterating the bar
        yields its items, no more and no fewer."""
        if not isinstance(binding, cst.Call):
            return None
        if self.model.resolver.qualname(module, binding.func, scope) not in api.TQDM:
            return None
        return argument(binding, "iterable", 0)

    def _wraps_own_value(self, scope: Scope, name: str, inner: cst.BaseExpression, point: Point,
                         everywhere: Sequence[tuple[object, Point]]) -> bool:
        """`pbar = enumerate(loader)`, then `if rank == 0: pbar = tqdm(pbar, ...)`: the bar is made
        over the name's own value, and every binding of it that reaches the bar is one made on
        every rank, so iterating either yields the same items."""
        if not isinstance(inner, cst.Name) or inner.value != name:
            return False
        before = self.model.values.reaching(scope, name, point)
        shared = {id(b) for b, _ in everywhere}
        return bool(before) and all(p is not None and id(b) in shared for b, p in before)

    def _ranked(self, module: ModuleModel, scope: Scope, point: Point, flags: bool) -> Guard | None:
        """The guard of `point` that keeps it off some ranks (main, other, or the spawn path's),
        a rank-0 one first."""
        kinds = [(g, self.kind(module, g, scope)) for g in point.guards]
        return next((g for g, k in kinds if k == "main"), None) or next(
            (g for g, k in kinds if k == "other" or flags and k == "flag"), None)

    def receiver_only_on_main(self, site: CallSite) -> bool:
        """`self.logger.save(model)` where the logger exists on rank 0 only (None elsewhere): the
        call can only run there."""
        receiver = site.receiver
        if not isinstance(receiver, (cst.Name, cst.Attribute)) or dotted(receiver) in (None, "self"):
            return False
        return self.only_on_main(site.module, receiver, site.scope, site.point)

    def callee_only_on_main(self, site: CallSite) -> bool:
        """The callable is chosen by rank and what the call resolves to is rank 0's choice only:
        `bar = tqdm if is_main else iter`, then `bar(loader)` (the other ranks call `iter`). Every
        value of the callee is picked under a rank test, and none picked for the other ranks is
        the same API. A value picked on every rank, or not known, says nothing."""
        func = site.node.func
        if not isinstance(func, cst.Name) or site.module.names.origin(func.value) is not None:
            return False  # (an imported name is the same callable on every rank)
        wanted = self.model.api(site)
        if wanted is None:
            return False
        main = False
        for value in self.model.values.of(site.module, func, site.scope, at=site.point, depth=8):
            if not isinstance(value.node, cst.BaseExpression) or value.node is func:
                return False
            kinds = {self.kind(value.module, g, value.scope) for g in value.conditions}
            if "main" in kinds:
                main = True
            elif "other" in kinds:
                if self.model.resolver.qualname(value.module, value.node) == wanted:
                    return False
            else:
                return False
        return main

    # --- every rank --------------------------------------------------------------------------
    def every_rank(self, site: CallSite) -> list[CallSite] | None:
        """A chain of calls (outermost first) along which `site` runs on every rank of a
        distributed job; None when every path to it is guarded, or nothing is known."""
        if self.main_only(site) is not None or self.single_only(site) is not None or self.rank_guard(site, False) \
                or self.some_only(site) is not None:
            return None
        if self.never(site) is not None or self.dead(site) or self.receiver_only_on_main(site):
            return None
        function = self.function_of(site)
        if function is None:
            return []
        return self._function_every_rank(function, frozenset(), site)

    def function_every_rank(self, function: Function) -> list[CallSite] | None:
        """A chain of calls (outermost first) along which every rank runs `function`, also
        through the two arms of one rank test (`if rank == 0: train(..., writer)` / `else:
        train(..., None)`); None when none is known."""
        return self._function_every_rank(function, frozenset())

    def dead(self, site: CallSite) -> bool:
        """`site` never runs when the linted file runs: it sits in an imported module's
        `__main__` block, or in a function called only from there (`_self_test()`), or on the
        arm of an `if` that a flag the command line cannot change rules out (`else:` of `if
        args.multiprocessing_distributed:` declared `action="store_true", default=True`)."""
        if self.imported_main(site) or self.flag_rules_out(site):
            return True
        function = self.function_of(site)
        if function is None:
            return False
        if function.module is self.model.root:
            return self.unused_method(function)
        callers = self.model.graph.callers(function)
        return bool(callers) and all(self.imported_main(call) or self.flag_rules_out(call) for call, _ in callers)

    @staticmethod
    def flag_rules_out(site: CallSite) -> bool:
        """A guard of `site` is a flag its module declares with one value only (a store_true
        option with `default=True`, or store_false with `default=False`, never assigned), and
        `site` sits on the arm that value never takes. Read from the declarations alone, so
        it is safe to ask while values are being followed."""
        return any(constant_flag(site.module, g.test) is g.negated for g in site.guards)

    def uncalled(self, site: CallSite) -> bool:
        """`site` sits in a top-level function of the linted file, a script (it has a `__main__`
        block), that nothing calls or names (a helper left over, `def reduce_mean(t, n): ...`
        never used): it never runs. A file without a `__main__` block may be imported: unknown."""
        function = self.function_of(site)
        return function is not None and self.uncalled_function(function)

    def uncalled_function(self, function: Function) -> bool:
        """`function` is a top-level function of the linted script that nothing calls or names
        (see `uncalled`). One that sets up the process group or wraps the model is still taken
        to run where something outside the file's code may call it: it is decorated
        (`@app.command()`), the file hands its functions out by name (`fire.Fire()`,
        `globals()[name]`), or another project module imports the file. Otherwise it is a
        set-up left beside the one the run uses (`def run_local(rank, world_size):` writing
        MASTER_ADDR for an `mp.spawn` the `__main__` block no longer makes)."""
        if function.module is not self.model.root or not function.module.main_guards \
                or function.owner is not None or "." in function.qualname:
            return False
        # The same answer for every call in the function (once the reach is complete, as callers' is).
        key = (id(function.module), function.qualname)
        found = self._uncalled.get(key)
        if found is None:
            found = not self._runs_unnamed(function) and not self.model.graph.callers(function) \
                and bare_names(function.module.source)[function.name] == 1  # its own `def` only
            if self.model.reach_complete and self.model.values.whole:
                self._uncalled[key] = found
        return found

    def never_runs(self, site: CallSite) -> bool:
        """`site` sits in a function of the linted script that no run reaches: one nothing calls
        or names (`uncalled`), or a top-level helper whose every call sits in such a function
        (`save_checkpoint` called only from a `train_v1` the `__main__` block no longer runs),
        two calls up at most. The helper's name appears in the script only in its `def` and in
        those calls (not passed as a callback), and no other project module imports the script."""
        function = self.function_of(site)
        return function is not None and self._never_runs(function, 2)

    def _never_runs(self, function: Function, depth: int) -> bool:
        if self.uncalled_function(function):
            return True
        module = function.module
        if depth == 0 or module is not self.model.root or not module.main_guards \
                or function.owner is not None or "." in function.qualname or module.decorators.get(function.qualname):
            return False  # (a decorated helper may be registered and called by name)
        callers = self.model.graph.callers(function)
        if not callers or any(call.module is not module for call, _ in callers):
            return False
        named = bare_names(module.source)[function.name]
        if named != 1 + len(callers) or self._script_imported():
            return False
        for call, _ in callers:
            outer = self.function_of(call)
            if outer is None or outer.qualname == function.qualname or not self._never_runs(outer, depth - 1):
                return False
        return True

    def _runs_unnamed(self, function: Function) -> bool:
        """`function`, named nowhere in the script's code, may still run (see uncalled_function)."""
        if not self._is_entry(function):
            return False
        if _ENTRY_NAME.match(function.name) or function.module.decorators.get(function.qualname):
            return True
        code = code_only(function.module.source)
        if _BY_NAME.search(code):
            return True
        facts = self.model.facts.of_scope(function.module, function.qualname)
        if "init_process_group" not in facts and "ddp_wrap" not in facts:
            return True  # (an entry for another reason: a spawn target)
        return self._script_imported()

    def unused_method(self, function: Function) -> bool:
        """`function` is a method of a plain class of the linted script (`class Fitter:` with
        no base but `object`) that nothing can call: no call resolves to it, and its name
        appears in the script only in its own `def` and as an attribute of an imported module
        (`torch.load`, `json.load`), never bare or as a string (`getattr(self, "load")`); no
        other project module imports the script. A resume method whose only call is commented
        out (`# fitter.load(path)`) never runs. A decorated, special or property method, a
        method of a class with project or library bases (a framework may call it by name), or a
        file that may be imported is unknown."""
        module = function.module
        owner = function.owner
        name = function.name
        if owner is None or function.qualname.count(".") != 1 or "." in owner.qualname \
                or name.startswith("__") or module.decorators.get(function.qualname) \
                or not self.model.is_entry_point():
            return False
        if any(dotted(base) != "object" for base in owner.bases):
            return False
        key = (id(module), function.qualname)
        found = self._uncalled.get(key)
        if found is not None:
            return found
        found = not self.model.graph.callers(function) and _only_module_attributes(module, name) \
            and not self._script_imported()
        if self.model.reach_complete and self.model.values.whole:
            self._uncalled[key] = found
        return found

    def _script_imported(self) -> bool:
        """Some other project module imports the linted file by its module name."""
        if self._imported is None:
            root = self.model.root
            stem = Path(root.path).stem
            own = resolved_path(root.path)
            project = self.model.project
            self._imported = any(path != own and stem in project.import_words(path)
                                 for path in project_files(root.path))
        return self._imported

    def imported_main(self, site: CallSite) -> bool:
        """`site` sits under the `if __name__ == "__main__":` block of a project module other
        than the linted file: that module is imported, so the block never runs (a helper
        module's self-test)."""
        module = site.module
        if module is self.model.root or not module.main_guards:
            return False
        mains = {id(node) for node in module.main_guards}
        return any(id(g.node) in mains and not g.negated for g in site.guards)

    def _function_every_rank(self, function: Function, seen: frozenset[Function],
                             inner: CallSite | None = None,
                             dispatch: _OnSelf | None = None) -> list[CallSite] | None:
        """A chain along which every rank calls `function` and, through it, `inner` (a call in
        it: a caller whose arguments make a guard of `inner` false does not count). With
        `dispatch`, `function` is a method that reaches `inner` through `self.<name>()` calls,
        which depend on the object it runs on: a call of `function` on objects of subclasses
        that override a method on the way (`trainer.train()` on a `DDPTrainer` with its own
        `_run_epoch`), or whose own `self.<test>()` guarding the way returns a rank-0 test
        (`if self._should_save(epoch):`), does not count."""
        key = (id(function.module), function.qualname)
        # The answer depends on `inner` only when its guards read names the arguments may set.
        shared = (inner is None or not _reads_names(inner)) and dispatch is None
        if shared and key in self._every:
            return self._every[key]
        if function in seen:
            return None
        seen = seen | {function}
        result: list[CallSite] | None = None
        callers = self.model.graph.callers(function)
        for call, bound in callers:
            if self.main_only(call) or self.single_only(call) or self.rank_guard(call, False) or self.never(call) \
                    or self.dead(call) or self.receiver_only_on_main(call) or self.some_only(call):
                continue
            if inner is not None and self._dead_from(inner, function, call, bound):
                continue
            on_self = bound == "method" and _on_self(call)
            if dispatch is not None and bound == "method" and not on_self and self._not_run_on(call, dispatch):
                continue
            outer = self.function_of(call)
            if outer is None:
                result = [call]
                break
            # `self.step()` in a base method: the object the base method runs on decides which
            # `step` runs, and what its `self.<test>()` guards return, so the question goes up
            # with it to the call on the object.
            above_dispatch = None
            if on_self and function.owner is not None:
                above_dispatch = _OnSelf((*(dispatch.methods if dispatch else ()), function),
                                         (*(dispatch.tests if dispatch else ()), *_self_tests(call)))
            above = self._function_every_rank(outer, seen, call, above_dispatch)
            if above is not None:
                result = above + [call]
                break
        if result is None:
            result = self._both_arms(callers, seen, inner, function)
        if result is None and not callers and self._is_entry(function):
            result = []
        if shared and not seen - {function} and self.model.values.whole:  # a complete answer
            self._every[key] = result
        return result

    def _not_run_on(self, call: CallSite, dispatch: _OnSelf) -> bool:
        """Every object `call`'s receiver may hold is an instance of a project class that
        overrides one of `dispatch`'s methods (its name resolves to another function there), or
        whose method of one of `dispatch`'s test names returns a rank-0 test."""
        func = call.node.func
        if not isinstance(func, cst.Attribute):
            return False
        graph = self.model.graph
        values = self.model.values.at_call(call, func.value)
        if not values:
            return False
        for value in values:
            instances = graph.instances_of(value)
            if not instances:
                return False
            for module, info in instances:
                if all(graph.method(module, info, m.name) == m for m in dispatch.methods) \
                        and not any(self._returns_main_test(graph.method(module, info, t)) for t in dispatch.tests):
                    return False
        return True

    def _returns_main_test(self, function: Function | None) -> bool:
        """Every `return` of the method gives a test that holds on rank 0 only (`return
        self._rank == 0 and self.cfg.save`)."""
        if function is None:
            return False
        scope = function.scope
        resolve = self.model.resolver_for(function.module, scope)
        returned = [r.value for r in _returns(function.node.body)]
        return bool(returned) and all(r is not None and selects_main_rank(r, resolve) is True for r in returned)

    def _both_arms(self, callers: list[tuple[CallSite, str]], seen: frozenset[Function],
                   inner: CallSite | None, function: Function) -> list[CallSite] | None:
        """`if rank == 0: train(..., writer)` / `else: train(..., None)`: two calls of the function
        in the two arms of one rank test (and under the same other guards), that together run it
        on every rank where their function runs on every rank. The chain through the other
        ranks' call."""
        arms: dict[tuple[int, tuple[tuple[int, bool], ...]], dict[bool, tuple[CallSite, Guard]]] = {}
        for call, bound in callers:
            guard = self.rank_guard(call, False)
            if guard is None or not isinstance(guard.node, cst.If) or self.never(call) or self.dead(call) \
                    or self.receiver_only_on_main(call) or self.single_only(call):
                continue
            if inner is not None and self._dead_from(inner, function, call, bound):
                continue
            others = tuple((id(g.node), g.negated) for g in call.guards if g is not guard)
            arms.setdefault((id(guard.node), others), {})[guard.negated] = (call, guard)
        for pair in arms.values():
            if len(pair) != 2:
                continue
            call = next(c for c, g in pair.values() if self.kind(c.module, g, c.scope) != "main")
            outer = self.function_of(call)
            if outer is None:
                return [call]
            above = self._function_every_rank(outer, seen, call)
            if above is not None:
                return above + [call]
        return None

    def _is_entry(self, function: Function) -> bool:
        """A function nobody calls that every rank still runs: a spawn target, a main-like name,
        a function that sets up the process group or wraps the model."""
        module = function.module
        if module is not self.model.root or function.owner is not None:
            return False
        if "." in function.qualname:
            return False
        if _ENTRY_NAME.match(function.name):
            return True
        for site in module.calls:
            if self.model.api(site) in api.PROCESS_STARTERS:
                target = site.arg("fn", 0) or site.arg("target")
                if target is not None and dotted(target) == function.name:
                    return True
        facts = self.model.facts.of_scope(module, function.qualname)
        return "init_process_group" in facts or "ddp_wrap" in facts


def _empty(function: cst.FunctionDef) -> bool:
    """The function does nothing: its body is `pass`, `...`, a docstring, `return` or
    `return None`."""
    body = function.body
    lines = body.body if isinstance(body, cst.IndentedBlock) else [body]  # (`def f(): pass`: one suite)
    for line in lines:
        if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        for small in line.body:
            if isinstance(small, cst.Pass) or isinstance(small, cst.Return) and (small.value is None or is_none(small.value)):
                continue
            if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis)):
                continue
            return False
    return True


def _only_module_attributes(module: ModuleModel, name: str) -> bool:
    """Every use of `name` in the module's code is a `def` of it or an attribute of an imported
    module (`torch.load(...)`): nothing there can reach a method of that name."""
    text = code_only(module.source)
    for match in re.finditer(rf"(?<![\w]){re.escape(name)}\b", text):
        head = text[max(0, match.start() - 200):match.start()]
        if re.search(r"\bdef[ \t]+$", head):
            continue
        receiver = re.search(r"(?<![\w.])([A-Za-z_][\w.]*)\.$", head)
        if receiver is None:
            return False  # bare (`fn = load`), in a string (`getattr(self, "load")`), or after `)`
        first = receiver.group(1).split(".", 1)[0]
        if module.names.origin(first) is None or first in module.functions or first in module.classes:
            return False
    return True


def is_no_grad(model: PathsModel, module: ModuleModel, withs: tuple[cst.With, ...], function: str | None) -> bool:
    """Whether code runs under `torch.no_grad()` / `inference_mode()` (a with block, or a
    decorator of its function)."""
    for w in withs:
        for item in w.items:
            expr = item.item.func if isinstance(item.item, cst.Call) else item.item
            if model.qualname(module, expr) in api.NO_GRAD:
                return True
    if function is not None:
        for decorator in module.decorators.get(function, ()):
            expr = decorator.func if isinstance(decorator, cst.Call) else decorator
            if model.qualname(module, expr) in api.NO_GRAD:
                return True
    return False


def _calls_parameter(site: CallSite) -> bool:
    """`fun(*args)` where `fun` is a parameter of the calling function: a callback."""
    func = site.node.func
    return isinstance(func, cst.Name) and site.scope.kind == "function" and any(
        isinstance(b, Param) for b in site.scope.assignments.get(func.value, []))


def _reads_names(site: CallSite) -> bool:
    """Whether a guard of `site` tests a name the values of a call may decide (`if save:`,
    `if model is not None:`, `mode == "eval"`)."""
    for guard in site.guards:
        for sub in _operands(guard.test):
            reading = literal_test(sub)
            if reading is not None and isinstance(reading[0], cst.Name):
                return True
    return False


def _operands(test: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The tests `not`/`and`/`or` combine."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        yield from _operands(test.expression)
    elif isinstance(test, cst.BooleanOperation):
        yield from _operands(test.left)
        yield from _operands(test.right)
    else:
        yield test


def _presence(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """`x is not None` / `x` (True: holds when x exists), `x is None` / `not x` (False): the
    expression tested and the answer where it exists."""
    if isinstance(test, (cst.Name, cst.Attribute)):
        return test, True
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and isinstance(test.expression, (cst.Name, cst.Attribute)):
        return test.expression, False
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comp = test.comparisons[0]
        if isinstance(comp.operator, (cst.Is, cst.IsNot)) and is_none(comp.comparator) \
                and isinstance(test.left, (cst.Name, cst.Attribute)):
            return test.left, isinstance(comp.operator, cst.IsNot)
    return None


def _local_rank_test(test: cst.BaseExpression, resolve: Resolve) -> bool:
    """A rank test whose rank-0 side reads a local rank (`args.local_rank == 0`, `LOCAL_RANK`,
    `args.gpu == 0`): one process per node passes it. `args.local_rank == -1 or
    dist.get_rank() == 0` reads the global rank."""
    ranked = [o for o in _operands(test) if selects_main_rank(o, resolve) is not None]
    return bool(ranked) and all(
        _LOCAL.search(" ".join(n.value for n in subexpressions(o) if isinstance(n, (cst.Name, cst.SimpleString))))
        for o in ranked)


_LOCAL = re.compile(r"local_rank|LOCAL_RANK|local_process_index|is_local_main|local_main|\bgpu\b", re.I)


# Exceptions a loop raises to say it is done, not that something failed.
_CONTROL_FLOW = frozenset({"StopIteration", "StopAsyncIteration", "KeyboardInterrupt", "GeneratorExit"})


def handler_calls(module: ModuleModel, errors_only: bool = False) -> set[int]:
    """The calls of `module` written inside an `except` handler (ids of the Call nodes; made
    once per module). `errors_only`: only handlers for an error, not `except StopIteration:`
    (the usual way to restart an iterator at the end of an epoch), so what such a call reports is
    the failure of the rank that hit it. A function defined in a handler runs when it is called,
    so its body is not inside."""
    key = "error_handler_calls" if errors_only else "handler_calls"
    found: set[int] | None = module.memo.get(key)
    if found is not None:
        return found
    every: set[int] = set()
    errors: set[int] = set()
    # A module whose text has no `except` has no handler: its statements are not walked.
    stack: list[tuple[cst.CSTNode, bool, bool]] = [(module.tree, False, False)] if "except" in module.source else []
    while stack:
        node, inside, for_error = stack.pop()
        kind = type(node)
        if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
            inside = for_error = False
        elif kind is cst.ExceptHandler or kind is cst.ExceptStarHandler:
            caught_type = node.type  # type: ignore[attr-defined]
            caught = {last_name(sub) for sub in subexpressions(caught_type)} if caught_type is not None else set()
            inside, for_error = True, not caught & _CONTROL_FLOW
        if inside:
            if kind is cst.Call:
                every.add(id(node))
                if for_error:
                    errors.add(id(node))
            if kind in TOKEN_NODES:
                continue  # no call below
        elif kind in NO_STATEMENTS:
            continue  # no handler below
        stack.extend((child, inside, for_error) for child in children(node))
    module.memo["handler_calls"] = every
    module.memo["error_handler_calls"] = errors
    return errors if errors_only else every


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of `a and b and c`; `test` itself when it is no conjunction."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def _picked_constant(test: cst.BaseExpression) -> tuple[str, str] | None:
    """`args.device == "cpu"` → ("args.device", "cpu"): a setting compared to one string."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.Equal):
        left, right = test.left, test.comparisons[0].comparator
        name = dotted(left)
        text = string_text(right) if isinstance(right, cst.SimpleString) else None
        if name and text is not None:
            return name, text
    return None


def _false_past_rank_zero(test: cst.BaseExpression, resolve: Resolve) -> bool:
    """An `or` one of whose operands holds on exactly the ranks but 0 (`if not enabled or not
    is_main(rank): return`): where the whole test is false, that operand is too, so only rank 0
    gets there (at most: the other operands narrow it further)."""
    if not isinstance(test, cst.BooleanOperation) or not isinstance(test.operator, cst.Or):
        return False
    return any(_false_past_rank_zero(side, resolve)
               or selects_main_rank(side, resolve) is False and whole_rank_test(side, resolve)
               for side in (test.left, test.right))


def _on_self(call: CallSite) -> bool:
    """`self.name(...)`: a method called on the object the calling method runs on."""
    func = call.node.func
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"


@dataclass(frozen=True)
class _OnSelf:
    """What a method's path runs through the object it is called on: the methods it reaches by
    `self.<name>()`, and the names of the `self.<test>()` methods whose results guard the way."""

    methods: tuple[Function, ...]
    tests: tuple[str, ...]


def _self_tests(call: CallSite) -> tuple[str, ...]:
    """The names of the `self.<test>(...)` calls that make up the guards of `call`, where the
    guard holds when the call returns true (`if self._should_save(epoch):`)."""
    out = []
    for guard in call.guards:
        test = guard.test
        if guard.negated or not isinstance(test, cst.Call) or not isinstance(test.func, cst.Attribute):
            continue
        if isinstance(test.func.value, cst.Name) and test.func.value.value == "self":
            out.append(test.func.attr.value)
    return tuple(out)


def _returns(body: cst.CSTNode) -> Iterator[cst.Return]:
    """The `return` statements of a function body, not of the functions and classes nested in it."""
    for node in children(body):
        if isinstance(node, cst.Return):
            yield node
        elif not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            yield from _returns(node)
