"""What functions do, followed through the call graph: "this call initialises the process
group", "this method performs a collective", "this helper reads LOCAL_RANK".

A fact is a name; a function has it when its body visibly does it, directly or through a function
it calls (any module of the project, any kind of call the graph follows). Facts from calls
(CALL_FACTS) come from resolved API names; body facts (BODY_FACTS) from what the traversal
recorded (ifs, returns, environment reads, assignments): no function body is walked again.
"""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.conditions import Resolve, selects_main_rank
from ddpcheck.lint.model.graph import CallGraph
from ddpcheck.lint.model.module import CallSite, ModuleModel, Scope
from ddpcheck.lint.model.syntax import string_text
from ddpcheck.lint.model.values import Values, definition_truth


class FactsModel(Protocol):
    """What the facts ask of the semantic model (semantic.Model)."""

    @property
    def graph(self) -> CallGraph: ...
    @property
    def values(self) -> Values: ...
    @property
    def own_launcher_keys(self) -> frozenset[str]: ...
    def resolver_for(self, module: ModuleModel, scope: Scope | None = None) -> Resolve: ...
    def api(self, site: CallSite) -> str | None: ...


# fact → the API calls that establish it
CALL_FACTS: dict[str, frozenset[str]] = {
    "init_process_group": frozenset({api.INIT_PROCESS_GROUP}),
    "destroy_process_group": frozenset({api.DESTROY_PROCESS_GROUP}),
    "set_device": api.SET_DEVICE | api.DEVICE_CONTEXTS,
    "distributed_sampler": frozenset({api.DISTRIBUTED_SAMPLER}),
    "ddp_wrap": frozenset({api.DDP}),
    "all_reduce": api.SUM_REDUCTIONS,
    "spawn": api.SPAWN,
    "barrier": api.BARRIERS,
    "save": frozenset({api.SAVE}),
    "load": frozenset({api.LOAD}),
    "sync_batchnorm": frozenset({api.CONVERT_SYNC_BATCHNORM}),
    "gather": api.GATHERS,
}
# Facts a call establishes by building an instance of a torch class: a project subclass of the
# class builds one too.
_CLASS_FACTS: dict[str, str] = {"distributed_sampler": api.DISTRIBUTED_SAMPLER, "ddp_wrap": api.DDP}
METHOD_FACTS = {"set_epoch": "set_epoch", "backward": "backward", "no_sync": "no_sync",
                "load_state_dict": "load_state_dict", "eval": "eval_mode"}
BODY_FACTS = frozenset({"rank_guard", "reads_launcher_env", "silences_print", "is_rank_check"})
# `with torch_distributed_zero_first(rank):` — a context manager pairs its barriers across ranks,
# so the collectives it performs are balanced by construction.
_BALANCED_BY_CONTEXT = frozenset({"collective", "data_collective", "barrier", "all_reduce"})
_PRINT_TARGETS = frozenset({"builtins.print", "__builtin__.print", "__builtins__.print"})


def _carries_nothing(name: str) -> bool:
    """A barrier: every rank waits for the others, but no value passes between them, so it
    cannot make the ranks agree on anything ("collective" without "data_collective")."""
    return name in api.BARRIERS or name.rsplit(".", 1)[-1] in ("barrier", "Barrier", "join")


def _training_only(site: CallSite) -> bool:
    """A call under `if self.training:` in a network's method: it runs in training mode only,
    not in an evaluation that called `model.eval()` first ("collective" is still recorded, and
    "collective_any_mode" only for collectives that run in either mode)."""
    for guard in site.guards:
        test = guard.test
        if not guard.negated and isinstance(test, cst.Attribute) and test.attr.value == "training" \
                and isinstance(test.value, cst.Name) and test.value.value == "self":
            return True
    return False


class Facts:
    def __init__(self, model: FactsModel) -> None:
        self.model = model
        self._memo: dict[tuple[int, str], frozenset[str]] = {}
        # Answers worked out after the budget ran out, kept for the rest of that budget only: the
        # rule that ran it out asks the same functions again and again (a project of hundreds of
        # files re-walked its call graph for every call), while the next rule, with a fresh
        # budget, must not inherit them.
        self._cut_memo: dict[tuple[int, str], frozenset[str]] = {}
        self._cut_period = -1
        self._class_facts: dict[tuple[str, str], frozenset[str]] = {}

    def of_call(self, site: CallSite) -> frozenset[str]:
        """What `site` does: its own API fact and the facts of the project functions it runs."""
        found = set(self.direct(site))
        for callee, _ in self.model.graph.targets(site):
            found |= self._passed_on(site, self.of_scope(callee.module, callee.qualname))
        return frozenset(found)

    def does(self, site: CallSite, fact: str) -> bool:
        return fact in self.of_call(site)

    def direct(self, site: CallSite) -> frozenset[str]:
        name = self.model.api(site)
        found = set()
        if name is not None:
            for fact, names in CALL_FACTS.items():
                if name in names:
                    found.add(fact)
            if api.is_collective(name):
                found.add("collective")
                if not _carries_nothing(name):
                    found.add("data_collective")
                if not _training_only(site):
                    found.add("collective_any_mode")
            if name == api.INIT_PROCESS_GROUP and site.has_keyword("device_id"):
                found.add("set_device")
            if name in api.ENV_GETTERS and name != "os.environ.setdefault":
                if string_text(site.arg("key", 0)) in api.LAUNCHER_ENV:
                    found.add("reads_launcher_env")
        found |= self._derived_class_facts(site)
        method = site.method
        if method in METHOD_FACTS:
            found.add(METHOD_FACTS[method])
        return frozenset(found)

    def _derived_class_facts(self, site: CallSite) -> frozenset[str]:
        """A project class derived from a torch class that establishes a fact is built like it:
        `DSElasticDistributedSampler(dataset=ds)` of `class DSElasticDistributedSampler(
        DistributedSampler)` makes a DistributedSampler, a `DistributedDataParallel` subclass
        wraps the model."""
        target = site.target
        if target is None or target.kind != "class" or target.external is not None:
            return frozenset()
        key = (str(target.path), target.name)  # asked for every call of the class, in every scope
        found = self._class_facts.get(key)
        if found is None:
            found = frozenset(fact for fact, base in _CLASS_FACTS.items() if self.model.graph.is_subclass(target, base))
            self._class_facts[key] = found
        return found

    def of_scope(self, module: ModuleModel, qualname: str, _seen: frozenset[tuple[int, str]] = frozenset()
                 ) -> frozenset[str]:
        """The facts of the function `qualname` of `module` ("<module>" for module-level code)."""
        key = (id(module), qualname)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        values = self.model.values
        if self._cut_period != values.period:
            self._cut_memo.clear()
            self._cut_period = values.period
        cached = self._cut_memo.get(key)
        if cached is not None:
            return cached
        if key in _seen:
            return frozenset()  # recursion: what the cycle adds is counted once
        seen = _seen | {key}
        found: set[str] = set()
        for site in module.calls_in(qualname):
            if any(definition_truth(module, site.scope, g.test) is g.negated for g in site.guards):
                continue  # under a test no run passes (`if not evaluate:` of a function object)
            found |= self.direct(site)
            for callee, _ in self.model.graph.targets(site):
                if callee.module is module and callee.qualname == qualname:
                    continue
                found |= self._passed_on(site, self.of_scope(callee.module, callee.qualname, seen))
        found |= self._body(module, qualname)
        result = frozenset(found)
        # Only complete answers are kept: a cycle may still be open below, or the budget ran out.
        if not _seen:
            if values.whole:
                self._memo[key] = result
            else:
                self._cut_memo[key] = result
        return result

    def _passed_on(self, site: CallSite, inherited: frozenset[str]) -> frozenset[str]:
        if "collective_any_mode" in inherited and _training_only(site):
            inherited = inherited - {"collective_any_mode"}
        if inherited & _BALANCED_BY_CONTEXT and self._opens_with(site):
            return inherited - _BALANCED_BY_CONTEXT
        return inherited

    def _opens_with(self, site: CallSite) -> bool:
        """`with cm(...):` — the call is the context manager of a with statement."""
        memo: set[int] | None = site.module.memo.get("with_items")
        if memo is None:
            memo = {id(item.item) for statement in site.module.withs for item in statement.items}
            site.module.memo["with_items"] = memo
        return id(site.node) in memo

    def _body(self, module: ModuleModel, qualname: str) -> frozenset[str]:
        found = set()
        resolve = self.model.resolver_for(module)
        for node, where in module.ifs:
            if where.qualname == qualname and selects_main_rank(node.test, resolve) is not None:
                found.add("rank_guard")
                break
        for value in module.returns.get(qualname, ()):
            if selects_main_rank(value, resolve) is True:
                found.add("is_rank_check")
                break
        for access in module.env:
            if not access.written and access.key in api.LAUNCHER_ENV and access.scope.qualname == qualname \
                    and access.key not in self.model.own_launcher_keys:
                found.add("reads_launcher_env")
                break
        scope = module.function_scopes.get(qualname) if qualname != "<module>" else module.module_scope
        if scope is not None:
            for name in scope.assignments:
                if name.endswith(".print"):
                    origin = module.names.origin(name) or name
                    if origin in _PRINT_TARGETS or name in _PRINT_TARGETS:
                        found.add("silences_print")
                        break
        return frozenset(found)

