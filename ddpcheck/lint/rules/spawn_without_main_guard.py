from __future__ import annotations

import os

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.rule import Invalid, Replace, Rule


class SpawnWithoutMainGuard(Rule):
    """`mp.spawn` / `start_processes` runs at module level, outside `if __name__ == "__main__":`.

    `torch.multiprocessing.spawn` starts workers with the `spawn` start method: each worker
    re-imports the main script. Without the guard the import runs the module-level `mp.spawn`
    again inside every child.

    ## Why it matters
    The children fail with "An attempt has been made to start a new process before the current
    process has finished its bootstrapping phase"; the parent then reports "process 0
    terminated with exit code 1" and the actual error is buried in a child's output.

    Also reported: a module-level call of a function that spawns (`main()` whose body calls
    `mp.spawn`), whether it is defined in the file or in a module of the project it imports.
    Not reported in a package's `__main__.py` (run as `python -m pkg`): multiprocessing does not
    re-run a main module named `__main__` in its children.

    ## How to fix
    Put the launch under the guard: `if __name__ == "__main__": mp.spawn(main, nprocs=n)`. The
    fix does that for a single statement (unsafe: it changes what happens when the module is
    imported).

    ## References
    - https://pytorch.org/docs/stable/multiprocessing.html#spawning-subprocesses
    - https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-methods
      ("Safe importing of main module")
    """

    code = "DDP017"
    name = "spawn-without-main-guard"
    severity = Severity.ERROR
    fixable = True
    MESSAGE = (
        "`mp.spawn` runs at module level: every spawned worker re-imports this file and runs it "
        "again; put it under `if __name__ == \"__main__\":`"
    )

    VALID = [
        """
        import torch.multiprocessing as mp
        def main(rank, world_size):
            pass
        if __name__ == "__main__":
            mp.spawn(main, args=(2,), nprocs=2, join=True)
        """,
        """
        # Spawning from a function that is only called under the guard.
        from torch.multiprocessing import spawn
        def run(n):
            spawn(worker, nprocs=n)
        if __name__ == '__main__':
            run(4)
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.multiprocessing as mp
            def main(rank):
                pass
            mp.spawn(main, nprocs=2)
            """,
            lines=(4,),
            fixed="""
            import torch.multiprocessing as mp
            def main(rank):
                pass
            if __name__ == "__main__":
                mp.spawn(main, nprocs=2)
            """,
        ),
        Invalid(
            """
            import torch.multiprocessing as mp
            def launch():
                mp.spawn(worker, nprocs=4)
            launch()
            """,
            lines=(4,),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        root = model.root
        if os.path.basename(root.path) == "__main__.py":
            # Run as `python -m pkg` (or `python dir/`): spawned children skip a main module
            # named `__main__` (multiprocessing does not re-run `pkg.__main__`), so nothing
            # launches twice.
            return
        for site in root.calls:
            if site.scope is not root.module_scope:
                continue
            if any(node is g.node for g in site.guards for node in root.main_guards):
                continue
            if any("__name__" in root.code(g.test) for g in site.guards):
                continue
            if model.api(site) in api.SPAWN:
                self._report(site)
            elif site.target is not None and site.target.external is None and "spawn" in model.facts.of_call(site):
                self._report(site, f"`{site.dotted}()` spawns workers and is called at module "
                                   "level: every worker re-imports this file and runs it again; call it under "
                                   "`if __name__ == \"__main__\":`")

    def _report(self, call: CallSite, message: str | None = None) -> None:
        statement = self._top_statement(call.node)
        fix = None
        if statement is not None and not call.guards:
            guarded = cst.If(
                test=cst.parse_expression('__name__ == "__main__"'),
                body=cst.IndentedBlock(body=[statement.with_changes(leading_lines=[])]),
                leading_lines=statement.leading_lines,
            )
            fix = Replace(statement, guarded, 'Move the call under `if __name__ == "__main__":`')
        self.report(call.node, message, fix)

    def _top_statement(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The module-level statement line that holds `node` as its expression or value."""
        for statement in self.model.root.tree.body:
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                continue
            small = statement.body[0]
            value = getattr(small, "value", None)
            if value is node:
                return statement
        return None
