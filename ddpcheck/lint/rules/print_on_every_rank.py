from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.conditions import selects_main_rank, under_rank_condition
from ddpcheck.lint.context import CallSite
from ddpcheck.lint.rule import Invalid, Rule

_LOG_METHODS = frozenset({"info", "debug", "warning", "log"})
_LOGGERS = re.compile(r"^(logger|log|logging|LOGGER|_logger|_LOGGER)$")
_RANKED_LOG_SETUP = re.compile(r"(basicConfig|setLevel)\(.*(rank|main|master)", re.I)


class PrintOnEveryRank(Rule):
    """`print`, `tqdm` or logging in the training loop runs on every rank, with no rank guard.

    ## Why it matters
    Each of the N processes prints its own copy: the console shows every line N times,
    interleaved, and N progress bars fight over the terminal. Logs grow N-fold and the line that
    matters (an error on one rank) is hard to find. Harmless for correctness, hence off by
    default and informational.

    Not reported: calls under a rank guard (`if rank == 0:`, `if is_main_process():`),
    `tqdm(..., disable=...)` and `tqdm(...) if is_main else loader`, files that silence `print`
    on other ranks by replacing `builtins.print` (DeiT/DETR's `setup_for_distributed`, also when
    it lives in an imported helper module), logging in files that set the log level by rank,
    and anything outside loops (startup messages).

    ## How to fix
    Guard output with `if rank == 0:` (or a helper such as `is_main_process()`), pass
    `disable=rank != 0` to `tqdm`, or set the logging level to WARNING on non-zero ranks.

    ## References
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    - https://github.com/facebookresearch/deit/blob/main/utils.py (`setup_for_distributed`)
    """

    code = "DDP020"
    name = "print-on-every-rank"
    severity = Severity.INFO
    default_enabled = False

    VALID = [
        """
        import torch.distributed as dist
        from tqdm import tqdm
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        for epoch in range(10):
            for x in tqdm(loader, disable=rank != 0):
                pass
            if rank == 0:
                print(f"epoch {epoch} done")
        """,
        """
        import torch.distributed as dist
        import builtins
        def setup_for_distributed(is_master):
            builtin_print = builtins.print
            def print(*args, **kwargs):
                if is_master:
                    builtin_print(*args, **kwargs)
            builtins.print = print
        dist.init_process_group("nccl")
        for epoch in range(3):
            print("epoch", epoch)
        """,
        """
        import tqdm
        import torch.distributed as dist
        dist.init_process_group("nccl")
        for epoch in range(3):
            bar = tqdm.tqdm(loader) if dist.get_rank() == 0 else loader
            for batch in bar:
                if is_main_process():
                    print(loss.item())
        """,
    ]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            dist.init_process_group("nccl")
            for epoch in range(10):
                train(epoch)
                print(f"epoch {epoch}: loss {loss:.3f}")
            """,
            line=5,
        ),
        """
        import logging
        from tqdm import tqdm
        import torch.distributed as dist
        logger = logging.getLogger(__name__)
        dist.init_process_group("nccl")
        for epoch in range(3):
            for x in tqdm(loader):
                logger.info("step")
        """,
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._calls: list[CallSite] = []
        self._rank_branches: set[int] = set()

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if selects_main_rank(node.test, self.ctx.qualname) is not None:
            self._rank_branches.add(id(node.body))
            self._rank_branches.add(id(node.orelse))

    def on_call(self, call: CallSite) -> None:
        kind = self._kind(call)
        if kind is None or id(call.node) in self._rank_branches:
            return
        if kind != "tqdm" and not call.loops:
            return
        if kind == "tqdm" and call.has_keyword("disable"):
            return
        if under_rank_condition(call.guards, self.ctx.qualname):
            return
        self._calls.append(call)

    def _kind(self, call: CallSite) -> str | None:
        if call.dotted == "print" and "print" not in self.ctx.functions:
            return "print"
        q = call.qualname or ""
        if q in ("tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm"):
            return "tqdm"
        if call.method in _LOG_METHODS:
            receiver = call.receiver or ""
            if q.startswith("logging.") or _LOGGERS.match(receiver.rsplit(".", 1)[-1]):
                return "logging"
        return None

    def finish(self) -> None:
        if not self._calls or not self.ctx.uses_ddp:
            return
        source = self.ctx.source
        print_silenced = "builtins.print" in source or "__builtin__.print" in source or any(
            self.ctx.helper_does(c, "silences_print") for c in self.ctx.calls
        )
        ranked_logging = bool(_RANKED_LOG_SETUP.search(source))
        for call in self._calls:
            kind = self._kind(call)
            if kind == "print" and print_silenced:
                continue
            if kind == "logging" and ranked_logging:
                continue
            what = {"print": "`print`", "tqdm": "this progress bar", "logging": "this log call"}[kind]
            how = "pass `disable=rank != 0`" if kind == "tqdm" else "guard it with `if rank == 0:`"
            self.report(call.node, f"{what} runs on every rank, so the output is repeated once per process; {how}")
