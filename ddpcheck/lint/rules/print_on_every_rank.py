from __future__ import annotations

import re

import libcst as cst

from ddpcheck.findings import Severity
from ddpcheck.lint.model import api
from ddpcheck.lint.model.module import CallSite
from ddpcheck.lint.rule import Invalid, Rule

_LOG_METHODS = frozenset({"info", "debug", "warning", "log"})
_LOGGERS = re.compile(r"^(logger|log|logging|LOGGER|_logger|_LOGGER)$")
_RANKED_LOG_SETUP = re.compile(r"(basicConfig|setLevel)\(.*(rank|main|master)", re.I)
_RANK = re.compile(r"rank", re.I)


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
    loggers imported from installed packages (their configuration is out of sight), messages
    that name the rank (`print(f"[rank {rank}] ...")` is meant for every rank), and anything
    outside loops (startup messages). A function of the project called from the loop on every
    rank (a progress printer's `display()`) is reported on its own line; one that is called only
    under a rank guard, or that nothing known calls, is not.

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
            # `RANK != -1` asks "launched distributed?": every rank takes that branch.
            import os
            import torch.distributed as dist
            RANK = int(os.getenv("RANK", -1))
            if RANK != -1:
                dist.init_process_group("nccl")
            for epoch in range(3):
                if RANK != -1:
                    print("synced epoch", epoch)
            """,
            lines=(9,),
        ),
        Invalid(
            """
            import torch.distributed as dist
            dist.init_process_group("nccl")
            for epoch in range(10):
                train(epoch)
                print(f"epoch {epoch}: loss {loss:.3f}")
            """,
            lines=(5,),
        ),
        Invalid(
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
            lines=(7, 8),
        ),
    ]

    def finish(self) -> None:
        model = self.model
        if not model.uses_ddp:
            return
        root = model.root
        print_silenced = "builtins.print" in root.source or "__builtin__.print" in root.source or any(
            "silences_print" in model.facts.of_call(c) for c in root.calls if c.target is not None
        )
        ranked_logging = bool(_RANKED_LOG_SETUP.search(root.source))
        for site in model.paths.sites():
            kind = self._kind(site)
            if kind is None:
                continue
            if kind != "tqdm" and not self._in_a_loop(site):
                continue
            if kind == "tqdm" and site.has_keyword("disable"):
                continue
            if model.paths.rank_guard(site, flags_count=False):
                continue
            if kind != "tqdm" and any(_RANK.search(site.module.code(a.value)) for a in site.node.args):
                continue  # `print(f"[rank {rank}] ...")`: output meant to come from every rank
            if kind == "print" and print_silenced:
                continue
            if kind == "logging" and (ranked_logging or not self._logger_visible(site)):
                continue
            if self._only_under_guards(site):
                continue
            what = {"print": "`print`", "tqdm": "this progress bar", "logging": "this log call"}[kind]
            how = "pass `disable=rank != 0`" if kind == "tqdm" else "guard it with `if rank == 0:`"
            self.report(site.node, f"{what} runs on every rank, so the output is repeated once per process; {how}",
                        module=site.module, related=model.paths.chain(site))

    def _kind(self, site: CallSite) -> str | None:
        if site.dotted == "print" and "print" not in site.module.functions:
            return "print"
        q = self.model.api(site) or ""
        if q in api.TQDM:
            return "tqdm"
        if site.method in _LOG_METHODS:
            receiver = site.receiver_name or ""
            if q.startswith("logging.") or _LOGGERS.match(receiver.rsplit(".", 1)[-1]):
                return "logging"
        return None

    def _in_a_loop(self, site: CallSite) -> bool:
        """In a loop, or in a function called from a loop (`progress.display(i)` each step)."""
        if site.loops:
            return True
        chain = self.model.paths.every_rank(site)
        return bool(chain) and any(call.loops for call in chain)

    def _only_under_guards(self, site: CallSite) -> bool:
        """The function holding `site` is called only under a rank guard (or under a condition
        no run takes), or nobody known calls it in a module that is only imported: whether it
        runs on every rank is not known."""
        if self.model.paths.never(site):
            return True
        function = self.model.paths.function_of(site)
        if function is None:
            return False
        if not self.model.graph.callers(function):
            return site.module is not self.model.root or not self.model.is_entry_point()
        return self.model.paths.every_rank(site) is None

    def _logger_visible(self, site: CallSite) -> bool:
        """Whether we can see how the logger is configured: `logging` itself or a logger made in
        this file, or one from a project module that does not mention ranks. A logger from an
        installed package may well be silenced on other ranks: not reported."""
        q = self.model.api(site) or ""
        if q.startswith("logging."):
            return True
        root = (site.receiver_name or "").split(".", 1)[0]
        target = self.model.resolver.name(site.module, root, site.scope) if root else None
        if target is None:
            return True  # created here
        if target.external is not None:
            return target.external.startswith("logging")
        if target.path is None:
            return False
        if str(target.path) == str(site.module.path) or target.kind == "value" and target.path == _path(site):
            return True  # made in this module
        text = self.model.project.text(target.path)
        return text is not None and not _RANK.search(text)


def _path(site: CallSite):
    from ddpcheck.lint.model.project import resolved_path

    return resolved_path(site.module.path)
