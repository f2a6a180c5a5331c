"""What the gradient, parameter and process-lifecycle probes share about the replicas DDP keeps
in sync: which parameters are compared across ranks (an optimizer's, those of the DDP-wrapped
modules, never ones sharded over the ranks), and how the script reduced its gradients without
the DDP wrapper (by hand before the step, or inside the optimizer's own step), read back from the
gradient probe's part of the records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from ddpcheck.run.checks._compare import entries, logs_by_rank
from ddpcheck.run.records import Record, section

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session


def optimizer_params(optimizer: Optimizer) -> Iterator[tuple[str, torch.Tensor]]:
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            yield f"param_groups[{gi}][{pi}]", p


def synchronised(session: Session, named: Iterator[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """(name, parameter) for the parameters DDP keeps in sync: those of the DDP-wrapped modules
    once there is one (an optimizer may also hold parameters that are rank-local by design,
    e.g. model-parallel embedding tables), else every one that is not sharded over the ranks,
    named as the user's modules name it where they can be found."""
    from ddpcheck.run.rank import param_names

    names = session.param_names
    if names:
        return [(names[id(p)], p) for _, p in named if id(p) in names]
    listed = [(n, p) for n, p in named if not param_names.sharded(p)]
    found = param_names.names([p for _, p in listed])
    return [(found.get(id(p), n), p) for n, p in listed]


def note_sharded(session: Session, part: dict[str, Any], optimizer: Optimizer, named: list[Any]) -> None:
    """Count the optimizer's parameters left out because they are sharded over the ranks, and
    those compared (the judges say when nothing could be)."""
    from ddpcheck.run.rank import param_names

    if session.param_names:
        return
    sharded = sum(1 for _, p in optimizer_params(optimizer) if param_names.sharded(p))
    if sharded:
        part["sharded"] = max(int(part.get("sharded", 0)), sharded)
        part["compared"] = max(int(part.get("compared", 0)), len(named))


def sharded_only(records: list[Record], probe: str) -> tuple[int, bool]:
    """(the most sharded parameters a rank's optimizer held, whether nothing else was compared)."""
    parts = [section(r, probe) for r in records if probe in r.get("probes", {})]
    sharded = max((int(p.get("sharded", 0)) for p in parts), default=0)
    return sharded, bool(sharded) and not any(int(p.get("compared", 0)) for p in parts)


SHARDED = ("not compared across ranks: each rank holds its own shard (FSDP flat parameters, "
           "sharded DTensors)")


def by_hand(sizes: list[int], grads: list[Any]) -> bool:
    """Whether the user's own reducing collectives since the last step reduced the gradients:
    a tensor the size of a gradient, or as many elements as half of them (flat buffers, buckets),
    not a logged loss or accuracy."""
    counts = {int(g.numel()) for g in grads if g is not None}
    total = sum(counts) if counts else 0
    large = [n for n in sizes if n > 1]
    return bool(total) and (any(n in counts for n in large) or 2 * sum(large) >= total)


def reduced_in_step(records: list[Record], probe: str) -> tuple[set[int], list[str]]:
    """(checked steps at which every rank's optimizer reduced across ranks inside its step, the
    optimizers' class names), from the gradient probe's part of the records (`probe`)."""
    logs = logs_by_rank(records, probe)
    per_rank = [{s for s, e in entries(log).items() if len(e) > 4 and e[4]} for log in logs.values()]
    steps = set.intersection(*per_rank) if per_rank else set()
    kinds = sorted({k for r in records for k in section(r, probe).get("reduced_in_step", {}).get("optimizers", [])})
    return steps, kinds


def reduced_by_hand(records: list[Record], probe: str) -> bool:
    """Every rank reduced its gradients itself, with its own collectives, before its steps (from the
    gradient probe's part of the records, `probe`)."""
    counts = [int(section(r, probe).get("by_hand", 0)) for r in records if probe in r.get("probes", {})]
    return bool(counts) and all(counts)
