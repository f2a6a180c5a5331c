from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint import remedies
from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite, Guard, ModuleModel
from ddpcheck.lint.model.symbols import Function
from ddpcheck.lint.model.syntax import dotted
from ddpcheck.lint.rule import Invalid, Replace, Rule

if TYPE_CHECKING:
    from ddpcheck.lint.model.semantic import Model

# A reference handed on (`register(dist.destroy_process_group)`), not a call nor a word in prose.
_REFERENCED = re.compile(r"destroy_process_group\s*[),\]]")


class MissingDestroyProcessGroup(Rule):
    """`init_process_group` is called but `destroy_process_group` never is.

    ## Why it matters
    A process group holds communicators, background threads and (with NCCL) GPU memory. When the
    script simply ends, they are torn down in whatever order the interpreter exits, while other
    ranks may still have operations in flight. Users see, at the end of every run,
    "WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal
    program exit, the application should call destroy_process_group to ensure that any pending
    NCCL operations have finished in this process. In rare cases this process can exit before this
    point and block the progress of another member of the process group" — and now and then a job
    that hangs or exits non-zero after training finished.

    Reported at the `init_process_group` call (or the call of a helper that makes it; in the
    file itself, the first in each of its functions: a script's modes, `train_model()` and
    `train_with_csgd()`, each make a group; the set-ups one call picks by name,
    `getattr(common_utils, "init_dist_%s" % args.launcher)(...)`, once, at the first) in a script
    that is run directly (a `__main__` guard or work at module level) when neither
    `destroy_process_group` nor a helper known to call it appears anywhere in the file; passing
    it as a callback (`atexit.register(dist.destroy_process_group)`) counts. Also reported (with
    the call as a related location) when every `destroy_process_group()` sits under a rank condition (in the `else:` of
    `if rank in (-1, 0):`, or under `if rank == 0:`): the other ranks never tear down (one
    under each arm of the same rank test, `if gpu == 0: ... destroy()` / `else: destroy()`,
    tears down every rank; a helper that tears down counts under the rank conditions of the
    calls that reach it, `if local_rank in [0, -1]: self._clean_up()`). Also reported, at the
    `init_process_group` a worker reaches, when the run spawns several workers
    (`mp.spawn(self.bert_worker, ...)`, `mp.spawn(self.gpt_worker, ...)`) and one of them sets up
    its group and never tears it down while another does. A
    teardown that runs only in an `except` handler (or in a helper called only from one), only
    in a signal handler (`signal.signal(signal.SIGTERM, handler)` and no other call of it), only
    in the process that starts the workers (`mp.spawn(main, ...)` then `cleanup()` in the
    `__main__` block: that process made no group), or in a function of the script that nothing
    calls does not count: a run that ends normally never reaches it. Helper modules that are only imported
    are not reported; a module the project's packaging installs as a command (a
    `console_scripts` entry of `setup.py`/`setup.cfg`, `[project.scripts]` of `pyproject.toml`)
    is a script, and so is a module that starts the workers itself (`mp.spawn(main_worker,
    ...)` in one of its functions, which a command of the package calls).

    ## How to fix
    Call `torch.distributed.destroy_process_group()` once training and evaluation are done, on
    every rank — in a `finally:` block if the training can raise. The fix appends it to the
    function that creates the group and trains (a `setup()` that only creates it is passed over
    for the function that calls it), or to the `__main__` block for module-level code. Where the
    group is made on some paths only (`if args.distributed: dist.init_process_group(...)`, a
    setup helper that returns early when there is no launcher), the call goes under
    `if dist.is_initialized():`, so that the same script run as one process does not raise. It
    is unsafe: code after that point in the same process (a caller that goes on using the group,
    an early `return` that skips the call) is not checked.

    ## References
    - https://pytorch.org/docs/stable/distributed.html#shutdown
    - https://github.com/pytorch/pytorch/issues/126275 (the exit warning since PyTorch 2.4)
    """

    code = "DDP005"
    fixable = True
    name = "missing-destroy-process-group"
    severity = Severity.WARNING
    MESSAGE = (
        "`init_process_group` is called but `destroy_process_group` never is: the process group is "
        "torn down unordered at exit; call `torch.distributed.destroy_process_group()` when training ends"
    )

    VALID = [
        """
        import torch.distributed as dist

        def main():
            dist.init_process_group("nccl")
            try:
                train()
            finally:
                dist.destroy_process_group()

        if __name__ == "__main__":
            main()
        """,
        """
        # Through local helpers, with an alias.
        from torch.distributed import init_process_group, destroy_process_group as teardown
        def setup():
            init_process_group("gloo")
        def cleanup():
            teardown()
        def main():
            setup()
            train()
            cleanup()
        if __name__ == "__main__":
            main()
        """,
        """
        # Registered as an exit callback.
        import atexit
        import torch
        torch.distributed.init_process_group("gloo")
        atexit.register(torch.distributed.destroy_process_group)
        """,
        """
        # A helper module: its callers tear the group down.
        import torch.distributed as dist
        def init_distributed_mode(args):
            dist.init_process_group(backend="nccl", init_method=args.dist_url)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist

            def main():
                dist.init_process_group("nccl")
                train()

            if __name__ == "__main__":
                main()
            """,
            lines=(4,),
            fixed="""
            import torch.distributed as dist

            def main():
                dist.init_process_group("nccl")
                train()
                dist.destroy_process_group()

            if __name__ == "__main__":
                main()
            """,
        ),
        Invalid(
            """
            # A helper sets up; nothing tears down (a comment naming it does not count).
            import torch
            def setup():
                torch.distributed.init_process_group("gloo")
            setup()
            train()  # destroy_process_group is not called
            """,
            lines=(4,),
            fixed="""
            # A helper sets up; nothing tears down (a comment naming it does not count).
            import torch
            def setup():
                torch.distributed.init_process_group("gloo")
            setup()
            train()  # destroy_process_group is not called
            torch.distributed.destroy_process_group()
            """,
        ),
        Invalid(
            """
            # A setup() that only creates the group: the fix goes where training ends.
            import os
            import torch.distributed as dist
            import torch.multiprocessing as mp

            def setup(rank, world_size):
                os.environ["MASTER_ADDR"] = "localhost"
                dist.init_process_group("gloo", rank=rank, world_size=world_size)

            def run(rank, world_size):
                setup(rank, world_size)
                model = build_model()
                for epoch in range(10):
                    train_one_epoch(model)
                return model

            if __name__ == "__main__":
                mp.spawn(run, args=(2,), nprocs=2)
            """,
            lines=(8,),
            fixed="""
            # A setup() that only creates the group: the fix goes where training ends.
            import os
            import torch.distributed as dist
            import torch.multiprocessing as mp

            def setup(rank, world_size):
                os.environ["MASTER_ADDR"] = "localhost"
                dist.init_process_group("gloo", rank=rank, world_size=world_size)

            def run(rank, world_size):
                setup(rank, world_size)
                model = build_model()
                for epoch in range(10):
                    train_one_epoch(model)
                dist.destroy_process_group()
                return model

            if __name__ == "__main__":
                mp.spawn(run, args=(2,), nprocs=2)
            """,
        ),
        Invalid(
            """
            # A script that also runs as one process: the group exists only when distributed.
            import torch.distributed as dist

            def main(args):
                if args.distributed:
                    dist.init_process_group("nccl")
                train(args)

            if __name__ == "__main__":
                main(parse_args())
            """,
            lines=(6,),
            fixed="""
            # A script that also runs as one process: the group exists only when distributed.
            import torch.distributed as dist

            def main(args):
                if args.distributed:
                    dist.init_process_group("nccl")
                train(args)
                if dist.is_initialized():
                    dist.destroy_process_group()

            if __name__ == "__main__":
                main(parse_args())
            """,
        ),
    ]

    GUARDED_MESSAGE = (
        "`destroy_process_group()` runs only under a rank condition ({cond}): the other ranks never "
        "tear their process group down; call it on every rank when training ends"
    )

    WORKER_MESSAGE = (
        "the spawned worker `{worker}` sets up a process group here and returns without "
        "`destroy_process_group()` (another worker of the run tears its group down): its processes "
        "exit with the group live; call `torch.distributed.destroy_process_group()` at the end of `{worker}`"
    )

    def finish(self) -> None:
        model = self.model
        sites = model.init_sites()
        # A module one of whose functions starts the workers (`mp.spawn(main_worker, ...)`) is
        # where the job starts, even when a command of the package calls that function.
        if not sites or not (model.is_entry_point() or model.console_script()
                             or any(model.api(c) in api.SPAWN for c in model.root.calls)):
            return
        root = model.root
        # `destroy_process_group(group)` tears down that group only, not the default one.
        destroys = [c for c in model.paths.sites()
                    if model.api(c) == api.DESTROY_PROCESS_GROUP and c.arg("group", 0) is None]
        # A teardown only in an `except` handler (or a helper called only from one) does not run
        # when training ends normally; nor does one only a signal handler runs, or one in a
        # function of the script that nothing calls.
        # Nor does one in the process that spawns the workers (`mp.spawn(main, ...)`, then
        # `cleanup()`): it holds no group, the workers that made theirs never tear them down.
        destroys = [c for c in destroys if not model.paths.on_error_only(c) and not model.paths.uncalled(c)
                    and not model.paths.launcher_only(c)]
        if destroys:
            # A teardown in a helper counts under the rank guards of the calls that reach it
            # (`if local_rank in [0, -1]: self._clean_up()`).
            ups = [model.paths.rank_guards_up(c) for c in destroys]
            guarded = [pair for up in ups if up is not None for pair in up]
            # One under each arm of the same rank test (`if rank == 0: ... destroy()` / `else:
            # destroy()`): every rank tears down.
            arms: dict[int, set[bool]] = {}
            for _, g in guarded:
                arms.setdefault(id(g.node), set()).add(g.negated)
            if all(up is not None for up in ups) and not any(len(a) == 2 for a in arms.values()):
                site, guard = guarded[0]
                # Reported at the init call, like a missing teardown; the guarded call is related.
                init = sites[0]
                self.report(init.node, self.GUARDED_MESSAGE.format(cond=_describe(site.module, guard)),
                            module=init.module, related=[*model.paths.chain(init), site])
                return
            self._leaking_workers()
            return
        # A reference handed on: atexit.register(dist.destroy_process_group).
        if _REFERENCED.search(_without_comments(root.source)):
            return
        # Last, as it follows the project's functions: one of them tears down.
        # Every init the run may go through in a helper (a SLURM branch and a torchrun branch are
        # two places); otherwise the file's own first one in each of its functions (the modes of a
        # script, `train_model()` and `train_with_csgd()`, each make a group and leave it).
        if sites[0].module is root:
            firsts: dict[str, CallSite] = {}
            for init in sites:
                if init.module is root and (not firsts or not model.paths.uncalled(init)):
                    firsts.setdefault(init.scope.qualname, init)
            sites = list(firsts.values())
        dispatched: set[int] = set()
        for init in sites:
            chain = model.paths.chain(init)
            # The set-ups one call picks by name (`getattr(common_utils, "init_dist_%s" %
            # args.launcher)(...)`) are one set-up of the run: reported once, at the first.
            picking = next((c for c in reversed(chain) if _picks_by_name(c)), None)
            if picking is not None:
                if id(picking.node) in dispatched:
                    continue
                dispatched.add(id(picking.node))
            fix = self._fix(init) if init.module is model.root else None
            self.report(init.node, module=init.module, related=chain, fix=fix)

    def _leaking_workers(self) -> None:
        """A worker the run spawns (`mp.spawn(self.bert_worker, ...)`) that sets up its group
        and returns without tearing it down, while another worker of the same run does: each
        spawned process holds its own group, so that worker's processes exit with theirs live."""
        model = self.model
        facts = model.facts
        reported: set[int] = set()
        for spawn in model.paths.sites():
            if model.api(spawn) not in api.SPAWN or model.paths.on_error_only(spawn):
                continue
            for worker, _ in model.graph.targets(spawn):
                done = facts.of_scope(worker.module, worker.qualname)
                if "init_process_group" not in done or "destroy_process_group" in done \
                        or _REFERENCED.search(_without_comments(worker.module.code(worker.node))):
                    continue
                init = self._init_below(worker.module, worker.qualname, 3)
                if init is None or id(init.node) in reported:
                    continue
                reported.add(id(init.node))
                self.report(init.node, self.WORKER_MESSAGE.format(worker=worker.name), module=init.module,
                            related=[*model.paths.chain(spawn), spawn])

    def _init_below(self, module: ModuleModel, qualname: str, depth: int) -> CallSite | None:
        """The `init_process_group` call that the function `qualname` makes, itself or through
        the project functions it calls, `depth` calls down."""
        model = self.model
        for call in module.calls_in(qualname):
            if model.api(call) == api.INIT_PROCESS_GROUP:
                return call
        if depth <= 0:
            return None
        for call in module.calls_in(qualname):
            if "init_process_group" not in model.facts.of_call(call):
                continue
            for callee, _ in model.graph.targets(call):
                found = self._init_below(callee.module, callee.qualname, depth - 1)
                if found is not None:
                    return found
        return None

    def _fix(self, site: CallSite) -> Replace | None:
        """Where training ends: the end of the function that makes `site` and trains, else of the
        function in this file that calls it."""
        model = self.model
        root = model.root
        scope = site.scope.function
        if scope is None:
            return remedies.destroy_at_end(root, None, model.api(site) != api.INIT_PROCESS_GROUP
                                           or not remedies.runs_whenever(root.tree, site.node))
        function = Function(root, scope.qualname)
        # A group made on some paths only (a script that also runs as one process; a helper of
        # another module that may return before making it) is destroyed only when it exists.
        guarded = model.api(site) != api.INIT_PROCESS_GROUP or not remedies.runs_whenever(function.node, site.node)
        if model.api(site) == api.INIT_PROCESS_GROUP and not _works_after(model, root, scope.qualname, site):
            callers = [c for c, _ in model.graph.callers(function) if c.module is root]
            if len(callers) != 1:
                return None
            outer = callers[0].scope.function
            if outer is None:
                guarded = guarded or not remedies.runs_whenever(root.tree, callers[0].node)
                return remedies.destroy_at_end(root, None, guarded)
            function = Function(root, outer.qualname)
            guarded = guarded or not remedies.runs_whenever(function.node, callers[0].node)
        return remedies.destroy_at_end(root, function.node, guarded)


def _works_after(model: Model, module: ModuleModel, function: str, init: CallSite) -> bool:
    """The function goes on after creating the group (trains, or calls what trains): it is not a
    `setup()` that only creates it."""
    for call in module.calls_in(function):
        if call.index <= init.index:
            continue
        name = model.api(call) or ""
        if not (name.startswith(("torch.distributed.", "torch.cuda.", "os.")) or name in ("print", "int", "str")):
            return True
    return False


def _describe(module: ModuleModel, guard: Guard) -> str:
    test = " ".join(module.code(guard.test).split())
    return f"`if {test}`" if not guard.negated else f"the else of `if {test}`"


def _without_comments(source: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines() if "destroy_process_group" in line)


def _picks_by_name(call: CallSite) -> bool:
    """`getattr(module, name)(...)`: a call of the function a name picks."""
    func = call.node.func
    return isinstance(func, cst.Call) and dotted(func.func) == "getattr"
