"""Ranks that train on identical inputs: the fingerprint of what the DDP model's forward receives,
at the first forward before each checked step. Disjoint indices do not prove different data (an
IterableDataset that does not shard by rank, synthetic inputs from identically seeded RNGs)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ddpcheck.run.checks._compare import StepLog, logs_by_rank, steps_by_rank
from ddpcheck.run.records import Record
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, plural
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

    from ddpcheck.run.rank.session import Session


class IdenticalInputs(RuntimeCheck):
    """Several ranks feed the same inputs to the DDP model.

    ## Why it matters

    Disjoint sampler indices do not prove different data: an `IterableDataset` that does not split
    its stream by rank, or synthetic inputs drawn from a generator seeded the same on every rank,
    give every rank the same batch. The ranks then compute the same gradients and the extra
    processes add nothing. ddpcheck fingerprints what the DDP model's forward receives at checked
    steps and reports ranks that saw identical inputs at most of them.

    ## How to fix

    Shard the data by rank: a `DistributedSampler`, or in an `IterableDataset` skip samples by
    `dist.get_rank()` / `get_worker_info()`; seed per-rank random inputs with `seed + rank`.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset
    """

    code = "DDP104"
    name = "identical-inputs"
    severity = Severity.ERROR
    INVALID = ("""
        class Stream(IterableDataset):
            def __iter__(self):
                yield from read_all_samples()  # every rank reads the whole stream
    """,)
    VALID = ("""
        class Stream(IterableDataset):
            def __iter__(self):
                rank, world = dist.get_rank(), dist.get_world_size()
                for i, sample in enumerate(read_all_samples()):
                    if i % world == rank:
                        yield sample
    """,)


NAME = "inputs"


def capture(session: Session) -> None:
    from ddpcheck.run.rank.fingerprint import structure_digest

    part = session.section(NAME)
    log = StepLog(session, part, session.add_slot(NAME))
    window = [0]  # the step whose first forward was fingerprinted

    def on_ddp_forward(ddp: DistributedDataParallel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        step = session.step + 1
        if step != session.next_checked or window[0] == step:
            return
        window[0] = step
        if "rows" not in part:
            from ddpcheck.run.checks._loader_indices import leading_rows

            part["rows"] = leading_rows((args, kwargs))
        digest = structure_digest((args, kwargs))
        if digest is not None:
            session.stage(NAME, digest)
            log.add([step, digest])

    session.on_ddp_forward.append(on_ddp_forward)


def _loader_batches(records: list[Record]) -> dict[str, tuple[dict[str, Any], dict[int, dict[int, int]]]]:
    """loader label -> (where the code made it, rank -> {step: digest}) for loaders without
    indices (see _loader_indices.py)."""
    from ddpcheck.run.checks._loader_indices import SECTION, loader_label, loader_place

    out: dict[str, tuple[dict[str, Any], dict[int, dict[int, int]]]] = {}
    for r in records:
        for info in r.get("probes", {}).get(SECTION, {}).get("loaders", []):
            if info.get("batches"):
                _, per = out.setdefault(loader_label(info), (loader_place(info), {}))
                per[r["rank"]] = {int(s): int(d) for s, d in info["batches"]}
    return out


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    per_rank = {r: s for r, s in steps_by_rank(logs_by_rank(records, NAME)).items() if s}
    verdict = _judge(per_rank, "fed identical inputs to the DDP model")
    if verdict.status != FAIL:
        # No DDP forward to look at, or it looked fine: the batches of loaders without indices.
        for label, (place, batches) in sorted(_loader_batches(records).items()):
            other = _judge({r: s for r, s in batches.items() if s}, f"drew identical batches from {label}")
            if other.status == FAIL:
                other = replace(other, **place)
            if other.status == FAIL or verdict.status == SKIP:
                verdict = other
            if other.status == FAIL:
                break
    return [verdict]


def _judge(per_rank: dict[int, dict[int, int]], what: str) -> Verdict:
    if len(per_rank) < 2:
        return Verdict(IdenticalInputs.code, SKIP, "no DDP forward with tensor inputs on two or more ranks")
    common = sorted(set.intersection(*(set(v) for v in per_rank.values())))
    if not common:
        return Verdict(IdenticalInputs.code, SKIP, "no common checked step")
    same_count: dict[tuple[int, int], int] = {}
    ranks = sorted(per_rank)
    for step in common:
        for i, a in enumerate(ranks):
            for b in ranks[i + 1:]:
                if per_rank[a][step] == per_rank[b][step]:
                    same_count[(a, b)] = same_count.get((a, b), 0) + 1
    # A pair is a fault when it saw the same inputs at more than half of the compared steps.
    pairs = sorted(p for p, n in same_count.items() if n * 2 > len(common))
    if not pairs:
        return Verdict(IdenticalInputs.code, PASS, f"inputs differ between ranks at {plural(len(common), 'checked step')}")
    involved = tuple(sorted({r for p in pairs for r in p}))
    worst = max(same_count[p] for p in pairs)
    shown = " and ".join(", ".join(map(str, group)) for group in _groups(pairs))
    return Verdict(IdenticalInputs.code, FAIL, f"ranks {shown} got identical inputs ({worst}/{len(common)} steps)",
                    message=f"Ranks {shown} {what} at {worst} of "
                    f"{plural(len(common), 'checked step')}: they compute the same gradients, so the extra "
                    "ranks add no data. Shard the data by rank (DistributedSampler, or split an "
                    "IterableDataset by get_rank()/get_worker_info()), and seed per-rank random "
                    "inputs with the rank.", ranks=involved, step=common[0],
                    details={"pairs": [list(p) for p in pairs], "checked_steps": len(common)})


def _groups(pairs: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """Ranks joined by identical inputs, as groups (0=1, 1=2 -> (0, 1, 2))."""
    groups: list[set[int]] = []
    for a, b in pairs:
        joined = [g for g in groups if a in g or b in g]
        merged = set().union(*joined, {a, b})
        groups = [g for g in groups if g not in joined] + [merged]
    return sorted(tuple(sorted(g)) for g in groups)


PROBE = Probe(NAME, (IdenticalInputs,), judge, capture, order=50)
