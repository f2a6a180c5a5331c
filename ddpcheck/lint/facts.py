"""Facts about what functions do — "this helper calls init_process_group" — so rules see through
helpers such as `setup()` in the same file or `utils.init_distributed_mode()` in another module
of the project.

A fact is a name; a function has it when its body visibly does it, directly or through another
function of the file or of the project (followed through imports, across modules). Facts:

- from calls (FACT_CALLS): init_process_group, destroy_process_group, set_device,
  distributed_sampler, ddp_wrap, spawn, all_reduce, collective, save (torch.save),
  load (torch.load), sync_batchnorm, barrier;
- from the body (BODY_FACTS): rank_guard (an `if` on a rank condition), reads_launcher_env
  (reads LOCAL_RANK/RANK/WORLD_SIZE from the environment), silences_print (replaces
  `builtins.print`, DeiT's `setup_for_distributed`), is_rank_check (returns a rank-0 test:
  `return get_rank() == 0`).

Imported modules are found by lint/project.py (the project's own import roots, never
site-packages), parsed with libcst — never imported —, walked once with the engine's walker and
cached by path for the whole run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.lint import project, traverse

if TYPE_CHECKING:
    from ddpcheck.lint.context import CallSite, FileContext

# Calls every rank of the group must make, in the same order, or the others wait forever.
_COLLECTIVES = frozenset(
    "torch.distributed." + n
    for n in (
        "all_reduce", "all_reduce_coalesced", "barrier", "monitored_barrier", "broadcast",
        "broadcast_object_list", "all_gather", "all_gather_object", "all_gather_into_tensor",
        "all_gather_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
        "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single",
        "new_group",
    )
)

# fact → the canonical calls that establish it
FACT_CALLS: dict[str, frozenset[str]] = {
    "init_process_group": frozenset({"torch.distributed.init_process_group"}),
    "destroy_process_group": frozenset({"torch.distributed.destroy_process_group"}),
    "set_device": frozenset({"torch.cuda.set_device"}),
    "distributed_sampler": frozenset({"torch.utils.data.DistributedSampler"}),
    "ddp_wrap": frozenset({"torch.nn.parallel.DistributedDataParallel"}),
    "all_reduce": frozenset({"torch.distributed.all_reduce", "torch.distributed.reduce"}),
    "spawn": frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}),
    "collective": _COLLECTIVES,
    "barrier": frozenset({"torch.distributed.barrier", "torch.distributed.monitored_barrier"}),
    "save": frozenset({"torch.save"}),
    "load": frozenset({"torch.load"}),
    "sync_batchnorm": frozenset({"torch.nn.SyncBatchNorm.convert_sync_batchnorm"}),
}
BODY_FACTS = frozenset({"rank_guard", "reads_launcher_env", "silences_print", "is_rank_check"})
_LAUNCHER_ENV = frozenset({"LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})

_MAX_MODULES = 512  # parsed modules kept per run
Target = tuple["FileContext", str]  # (the file's context, a function's qualified name in it)


class ProjectFacts:
    """One per lint run: caches the parsed helper modules (by path, checked against the file's
    size and mtime) and every function's facts."""

    def __init__(self) -> None:
        self._modules: dict[Path, tuple[tuple[int, int], FileContext | None]] = {}
        self.parsed = 0  # helper modules parsed so far (tests and benchmarks read it)

    # --- the API rules use -------------------------------------------------------------------
    def call_does(self, ctx: FileContext, call: CallSite, fact: str) -> bool:
        if call.qualname is not None and call.qualname in FACT_CALLS.get(fact, ()):
            return True
        target = self.target(ctx, call)
        if target is None:
            return False
        if fact not in BODY_FACTS:
            # Facts from calls need no walk of the function bodies (the costly part).
            return fact in self.call_facts(*target)
        return fact in self.function_facts(*target)

    def call_facts(self, ctx: FileContext, function: str) -> frozenset[str]:
        """The FACT_CALLS facts of `function` (what it and the project functions it calls call),
        from the calls the engine already recorded: no walk of function bodies (the costly part)."""
        return self._facts(ctx, function, frozenset(), with_body=False)

    def function_facts(self, ctx: FileContext, function: str) -> frozenset[str]:
        """call_facts plus the BODY_FACTS of `function` and of the functions it calls."""
        return self._facts(ctx, function, frozenset(), with_body=True)

    file_function_facts = function_facts  # the first version's name

    def _facts(self, ctx: FileContext, function: str, _seen: frozenset, with_body: bool) -> frozenset[str]:
        cache = ctx.__dict__.setdefault("_function_facts" if with_body else "_call_facts", {})
        if function in cache:
            return cache[function]
        key = (ctx.path, function)
        if key in _seen:
            return frozenset()  # recursion (direct or mutual): what the cycle adds is counted once
        seen = _seen | {key}
        found: set[str] = set()
        for call in ctx.calls_in(function):
            if call.qualname is not None:
                for fact, calls in FACT_CALLS.items():
                    if call.qualname in calls:
                        found.add(fact)
            target = self.target(ctx, call)
            if target is not None and target != (ctx, function):
                found |= _passed_on(ctx, call, self._facts(*target, seen, with_body))
        if with_body:
            node = ctx.functions.get(function)
            if node is not None:
                found |= _body_facts(ctx, node)
        result = frozenset(found)
        if not _seen:  # only complete answers are cached (a cycle may still be open below)
            cache[function] = result
        return result

    def target(self, ctx: FileContext, call: CallSite) -> Target | None:
        """The function `call` invokes, when it is one of the file or of the project."""
        if call.qualname is None:
            if call.dotted in ctx.functions:
                return ctx, call.dotted
            if call.dotted and "." not in call.dotted:
                for module in _star_imports(ctx):
                    found = self._imported(ctx, f"{module}.{call.dotted}")
                    if found is not None:
                        return found
            return None
        return self._imported(ctx, call.qualname)

    def module_of(self, ctx: FileContext, qualname: str) -> FileContext | None:
        """The project module that defines an imported name (`utils.general.LOGGER`), if any."""
        if not ctx.path or ctx.path == "-":
            return None
        where = project.locate(Path(ctx.path).resolve(), qualname)
        return self.module(where[0]) if where is not None else None

    # --- cross-file --------------------------------------------------------------------------
    def _imported(self, ctx: FileContext, qualname: str) -> Target | None:
        if qualname.startswith("torch.") or not ctx.path or ctx.path == "-":
            return None
        if qualname.rsplit(".", 1)[-1][:1].isupper():
            return None  # a class: constructors are not followed, so don't parse a module to learn that
        where = project.locate(Path(ctx.path).resolve(), qualname)
        if where is None:
            return None
        path, function = where
        helper = self.module(path)
        if helper is None:
            return None
        if function in helper.functions:
            return helper, function
        # Re-exported: `from .dist import setup` in a package's __init__.py.
        origin = helper.names.aliases.get(function.split(".", 1)[0])
        if origin is not None and origin != qualname:
            rest = function.partition(".")[2]
            return self._imported(helper, f"{origin}.{rest}" if rest else origin)
        return None

    # --- sharing with the lint run: a file is parsed once whether it is linted or imported ------
    def parsed_tree(self, path: str, source: str) -> cst.Module | None:
        """The module tree of a file already read as a helper, if its text is `source`."""
        cached = self._modules.get(_resolved(path))
        if cached is not None and cached[1] is not None and cached[1].source == source:
            return cached[1].module
        return None

    def remember(self, ctx: FileContext) -> None:
        """Keep a linted file's context: it answers later imports of that file without a parse."""
        path = _resolved(ctx.path)
        if path is None:
            return
        try:
            stat = path.stat()
        except OSError:
            return
        if stat.st_size == len(ctx.source.encode("utf-8")):
            self._store(path, (stat.st_size, stat.st_mtime_ns), ctx)

    def _store(self, path: Path, stamp: tuple[int, int], ctx: FileContext | None) -> None:
        self._modules.pop(path, None)
        self._modules[path] = (stamp, ctx)
        while len(self._modules) > _MAX_MODULES:  # bound memory on huge trees: drop the oldest
            del self._modules[next(iter(self._modules))]

    def module(self, path: Path) -> FileContext | None:
        """The helper module at `path`, parsed and walked once per run (None if unreadable)."""
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = self._modules.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        ctx = None
        try:
            source = path.read_text(encoding="utf-8")
            module = cst.parse_module(source)
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError, RecursionError):
            module = None
        if module is not None:
            from ddpcheck.lint.context import FileContext
            from ddpcheck.lint.engine import walk

            ctx = FileContext(str(path), source, module, self)
            walk(ctx, [])
            self.parsed += 1
        self._store(path, stamp, ctx)
        return ctx


_BALANCED_BY_CONTEXT = frozenset({"collective", "barrier", "all_reduce"})


def _passed_on(ctx: FileContext, call: CallSite, inherited: frozenset[str]) -> frozenset[str]:
    """The callee's facts as seen by its caller. `with torch_distributed_zero_first(rank):` — a
    context manager that pairs its barriers across ranks — balances its collectives by construction."""
    if id(call.node) in _with_items(ctx):
        return inherited - _BALANCED_BY_CONTEXT
    return inherited


def _with_items(ctx: FileContext) -> set[int]:
    """Ids of the calls that open `with` blocks (`with cm(...):`), found from the calls inside them."""
    cached = ctx.__dict__.get("_with_items")
    if cached is None:
        cached = set()
        seen: set[int] = set()
        for call in ctx.calls:
            for w in call.withs:
                if id(w) not in seen:
                    seen.add(id(w))
                    cached.update(id(item.item) for item in w.items)
        ctx._with_items = cached
    return cached


def _resolved(path: str) -> Path | None:
    if not path or path == "-":
        return None
    try:
        return Path(path).resolve()
    except OSError:
        return None


def _star_imports(ctx: FileContext) -> list[str]:
    cached = ctx.__dict__.get("_star_imports")
    if cached is None:
        cached = []
        for statement in ctx.module.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                        from ddpcheck.lint.names import dotted

                        cached.append("." * len(small.relative) + (dotted(small.module) or "")
                                      if small.module is not None else "." * len(small.relative))
        ctx._star_imports = cached
    return cached


def _body_facts(ctx: FileContext, node: cst.FunctionDef) -> frozenset[str]:
    """Facts read from a function's own body (not its calls): walked lazily, one function at a time."""
    cache = ctx.__dict__.setdefault("_body_facts", {})
    if id(node) in cache:
        return cache[id(node)]
    finder = _BodyFacts(ctx)
    traverse.visit(node.body, finder)  # libcst's own visit rebuilds every node it passes
    cache[id(node)] = frozenset(finder.found)
    return cache[id(node)]


class _BodyFacts(cst.CSTVisitor):
    def __init__(self, ctx: FileContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.found: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested def runs only when called

    def visit_If(self, node: cst.If) -> None:
        from ddpcheck.lint.conditions import selects_main_rank

        if selects_main_rank(node.test, self.ctx.qualname) is not None:
            self.found.add("rank_guard")

    def visit_Return(self, node: cst.Return) -> None:
        from ddpcheck.lint.conditions import selects_main_rank

        if node.value is not None and selects_main_rank(node.value, self.ctx.qualname) is True:
            self.found.add("is_rank_check")

    def visit_Subscript(self, node: cst.Subscript) -> None:
        from ddpcheck.lint.names import dotted

        if (dotted(node.value) or "").endswith("environ") and len(node.slice) == 1:
            elem = node.slice[0].slice
            if isinstance(elem, cst.Index) and isinstance(elem.value, cst.SimpleString):
                if elem.value.evaluated_value in _LAUNCHER_ENV:
                    self.found.add("reads_launcher_env")

    def visit_Call(self, node: cst.Call) -> None:
        from ddpcheck.lint.names import dotted

        name = dotted(node.func) or ""
        if (name.endswith("environ.get") or name.endswith("getenv")) and node.args:
            first = node.args[0].value
            if isinstance(first, cst.SimpleString) and first.evaluated_value in _LAUNCHER_ENV:
                self.found.add("reads_launcher_env")

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        from ddpcheck.lint.names import dotted

        if dotted(node.target) in ("builtins.print", "__builtin__.print", "__builtins__.print"):
            self.found.add("silences_print")


