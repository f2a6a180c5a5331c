"""Facts about what functions do — "this helper calls init_process_group" — so rules see through
helpers such as `setup()` or `utils.init_distributed_mode()`.

A fact is a name such as "init_process_group", "set_device", "destroy_process_group",
"distributed_sampler", "collective", "rank_guard". A function has a fact when its body
visibly does it, directly or through another function of the project that has it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpcheck.lint.context import CallSite, FileContext

# fact → the canonical calls that establish it
FACT_CALLS: dict[str, frozenset[str]] = {
    "init_process_group": frozenset({"torch.distributed.init_process_group"}),
    "destroy_process_group": frozenset({"torch.distributed.destroy_process_group"}),
    "set_device": frozenset({"torch.cuda.set_device"}),
    "distributed_sampler": frozenset({"torch.utils.data.DistributedSampler"}),
    "ddp_wrap": frozenset({"torch.nn.parallel.DistributedDataParallel"}),
}


class ProjectFacts:
    """Facts for the functions of the file being linted (and, see issue 3, of the project modules it
    imports). Cached per run."""

    def file_function_facts(self, ctx: FileContext, function: str, _seen: frozenset = frozenset()) -> frozenset[str]:
        found = set()
        for call in ctx.calls_in(function):
            for fact, calls in FACT_CALLS.items():
                if call.qualname in calls:
                    found.add(fact)
            target = _local_target(ctx, call)
            if target and target not in _seen and target != function:
                found |= self.file_function_facts(ctx, target, _seen | {function})
        return frozenset(found)

    def call_does(self, ctx: FileContext, call: CallSite, fact: str) -> bool:
        if call.qualname in FACT_CALLS.get(fact, ()):
            return True
        target = _local_target(ctx, call)
        if target is not None:
            return fact in self.file_function_facts(ctx, target)
        return False


def _local_target(ctx: FileContext, call: CallSite) -> str | None:
    """The file-level function a call invokes, when the call is a plain name defined in the file."""
    if call.qualname is None and call.dotted in ctx.functions:
        return call.dotted
    return None
