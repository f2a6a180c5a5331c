"""Which dataset indices each rank draws, per DataLoader epoch: overlap across ranks, coverage,
and the missing DistributedSampler.

The indices are captured by _loader_indices.py (where the loader's iterator takes the next index
from its sampler), which set_epoch, evaluation and inputs read too. DistributedSampler's padding — `(-len(dataset)) %
world_size` repeated indices when drop_last is False — is told apart from real overlap.

Only training passes are judged here: the passes during which the rank took an optimizer step
(counted from the pass's first batch to its last). A peek at one batch (`next(iter(loader))` to
print the batch size), a warm-up batch or an evaluation pass over the training set takes none;
evaluation loaders are judged by evaluation.py. Shared indices are not shared data when each rank
makes its own: before saying that the ranks train on the same data, the samples the same index
gave on each rank and the data each rank's dataset keeps are compared (_samples.py).
"""

from __future__ import annotations

from typing import Any

from array import array
from dataclasses import replace

from ddpcheck.run.checks._loader_indices import (
    SECTION,
    capture,
    decode,
    kept_slice,
    loader_label,
    loader_place,
    loaders_by_index,
    training_passes,
)
from ddpcheck.run.records import Record, node_of
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck


class MissingDistributedSampler(RuntimeCheck):
    """Every rank reads the same samples because the DataLoader has no DistributedSampler.

    ## Why it matters

    Each DDP rank runs its own DataLoader. Without a `DistributedSampler` every rank draws from
    the whole dataset, so N ranks train N times on the same data: the job is no faster than one
    process and an "epoch" is N epochs. ddpcheck records the indices each rank's loader takes from
    its sampler and finds them shared across ranks.

    Not a finding: scripts that load the whole global batch on every rank and keep their own
    slice of it before the model (recommendation models such as DLRM do, to pair data-parallel
    layers with model-parallel embeddings). When each rank's DDP model gets exactly 1/N of the
    rows each rank loads, the check passes and says so.

    ## How to fix

    Pass `sampler=DistributedSampler(dataset)` to the DataLoader (and drop `shuffle=True`; the
    sampler shuffles), and call `sampler.set_epoch(epoch)` every epoch.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP100"
    name = "ranks-draw-same-samples"
    severity = Severity.ERROR
    explains = ("DDP104",)
    INVALID = ("""
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        model = DDP(model)
        for x, y in loader:
            ...
    """,)
    VALID = ("""
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        model = DDP(model)
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """,)


class OverlappingShards(RuntimeCheck):
    """Ranks draw the same dataset indices although a DistributedSampler is used.

    ## Why it matters

    A `DistributedSampler` built with the wrong `num_replicas` or `rank` (hard-coded, or taken
    from `LOCAL_RANK` on several nodes) gives several ranks the same shard: those samples count
    twice per epoch and others never appear. DistributedSampler's own padding (it repeats
    `(-len(dataset)) % world_size` indices when `drop_last=False`) is expected and not reported.

    ## How to fix

    Build the sampler with the defaults, which read the process group, or with
    `num_replicas=dist.get_world_size(), rank=dist.get_rank()`.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP101"
    name = "overlapping-shards"
    severity = Severity.ERROR
    explains = ("DDP104",)
    INVALID = ("""
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    """,)
    VALID = ("""
        sampler = DistributedSampler(dataset)  # world size and rank from the process group
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    """,)


class ShardCoverageGap(RuntimeCheck):
    """A complete epoch left samples that no rank drew.

    ## Why it matters

    When every rank finished an epoch, the union of their indices should cover the dataset, up
    to what `drop_last` drops. Missing samples mean the shards do not add up (a sampler split for
    more ranks than run), so part of the data is never trained on.

    ## How to fix

    Give the sampler the real world size (`DistributedSampler(dataset)` reads it from the process
    group); check custom samplers split `len(dataset)` over `get_world_size()` ranks.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP102"
    name = "shard-coverage-gap"
    severity = Severity.WARNING
    INVALID = ("""
        sampler = DistributedSampler(dataset, num_replicas=8, rank=dist.get_rank())  # 4 ranks run
    """,)
    VALID = ("""
        sampler = DistributedSampler(dataset)
    """,)


NAME = SECTION
NO_SAMPLER, OVERLAP, COVERAGE = MissingDistributedSampler.code, OverlappingShards.code, ShardCoverageGap.code


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    results: dict[str, list[Verdict]] = {NO_SAMPLER: [], OVERLAP: [], COVERAGE: []}
    checked = evaluated = 0
    for index, per_rank in sorted(loaders_by_index(records).items()):
        if len(per_rank) < 2 or len(per_rank) < ctx.world_size:
            continue
        first = per_rank[min(per_rank)]
        if first.get("iterable") or first.get("opaque"):
            continue
        training = training_passes(per_rank)
        if not training:
            evaluated += 1  # evaluation passes only: evaluation.py judges them
            continue
        same_data = _same_data(per_rank, training)
        for epoch, e in enumerate(training):
            if not all(i["epochs"][e].get("indices") for i in per_rank.values()):
                continue
            checked += 1
            drawn = {r: decode(i["epochs"][e]["indices"]) for r, i in per_rank.items()}
            complete = all(i["epochs"][e]["complete"] for i in per_rank.values())
            for code, verdict in _judge_epoch(first, epoch, drawn, complete, ctx, same_data).items():
                split = (kept_slice(records, per_rank, len(per_rank))
                         if code == NO_SAMPLER and verdict.status == FAIL else None)
                if code == OVERLAP and verdict.status == FAIL:
                    verdict = _per_node(verdict, drawn, records)
                if split is not None:
                    verdict = Verdict(NO_SAMPLER, PASS, f"{loader_label(first)} has no DistributedSampler, but "
                                      f"each rank keeps 1/{len(per_rank)} of every batch it loads ({split[0]} of "
                                      f"{split[1]} rows reach the DDP model)")
                results[code].append(verdict)
    if not checked:
        why = ("no data loader pass reached an optimizer step (evaluation passes only)" if evaluated
               else "no DataLoader with indices on every rank")
        return [Verdict(c, SKIP, why) for c in results]
    out = []
    for code, verdicts in results.items():
        fails = [v for v in verdicts if v.status == FAIL]
        if fails:
            out.append(fails[0])
        elif verdicts:
            out.append(verdicts[0] if len(verdicts) == 1 else
                       replace(verdicts[0], detail=f"{verdicts[0].detail} (+{len(verdicts) - 1} more epochs)"))
        else:
            out.append(Verdict(code, SKIP, "nothing to check"))
    return out


def _per_node(verdict: Verdict, drawn: dict[int, "array[int]"], records: list[Record]) -> Verdict:
    """Overlap on a job of several nodes where each node drew the same shards as the first: the
    sampler was built per node (LOCAL_RANK / LOCAL_WORLD_SIZE); said with the nodes."""
    where = {r.get("rank", 0): (node_of(r), r.get("local_rank", 0)) for r in records}
    nodes = sorted({node for node, _ in where.values()})
    if len(nodes) < 2:
        return verdict
    by_local: dict[Any, list[int]] = {}
    for rank in drawn:
        by_local.setdefault(where.get(rank, (0, rank))[1], []).append(rank)
    twins = [sorted(ranks) for ranks in by_local.values() if len(ranks) > 1]
    if not twins or not all(len({tuple(sorted(set(drawn[r]))) for r in ranks}) == 1 for ranks in twins):
        return verdict
    shown = "; ".join(" and ".join(f"rank {r} (node {where[r][0]})" for r in ranks) for ranks in sorted(twins)[:3])
    said = (f" Every node drew the same shards ({shown}, the same LOCAL_RANK): the sampler was given the "
            "node's LOCAL_RANK / LOCAL_WORLD_SIZE; give it the global rank and world size.")
    return replace(verdict, message=(verdict.message or "") + said,
                   details={**verdict.details, "per_node": True, "nodes": nodes})


def _same_data(per_rank: dict[int, dict[str, Any]], passes: list[int]) -> str:
    """Whether the ranks' datasets give the same samples for the same index (_samples.py): SAME,
    PER_RANK, VARYING (random at every access, same stored data: augmentation), UNKNOWN, or
    "indices" (no evidence beyond the indices)."""
    from ddpcheck.run.checks import _samples

    by_samples = _samples.sample_verdict(per_rank, passes)
    if by_samples in (_samples.SAME, _samples.PER_RANK):
        return by_samples
    stored = _samples.stored_verdict(per_rank)
    if stored == _samples.PER_RANK:
        return stored
    if by_samples == _samples.VARYING:
        return _samples.VARYING if stored == _samples.SAME else _samples.UNKNOWN
    return _samples.SAME if stored == _samples.SAME else "indices"


def _judge_epoch(info: dict[str, Any], epoch: int, drawn: dict[int, array[int]], complete: bool,
                 ctx: Context, same_data: str = "indices") -> dict[str, Verdict]:
    label = loader_label(info)
    world = len(drawn)
    n = info.get("dataset_len")
    seen: dict[int, set[int]] = {}
    for rank, values in drawn.items():
        for v in set(values):
            seen.setdefault(v, set()).add(rank)
    total = sum(len(v) for v in drawn.values())
    distinct = len(seen)
    excess = total - distinct
    shared = sorted(v for v, ranks in seen.items() if len(ranks) > 1)
    share_ranks = tuple(sorted({r for v in shared for r in seen[v]}))
    example = ", ".join(map(str, shared[:5]))
    where = f"epoch {epoch}"
    out: dict[str, Verdict] = {}
    coverage = f"{distinct}/{n}" if n else f"{distinct}"
    place = loader_place(info)
    if not info.get("distributed"):
        if excess > 0 and same_data == "per-rank":
            out[NO_SAMPLER] = Verdict(NO_SAMPLER, PASS, f"{label} has no DistributedSampler and the ranks draw "
                                      "the same indices, but from their own data (the same index gives "
                                      "another sample on each rank)", epoch=epoch)
        elif excess > 0 and same_data == "unknown":
            out[NO_SAMPLER] = Verdict(NO_SAMPLER, SKIP, f"{label}: the ranks draw the same indices, but the "
                                      "samples differ across ranks and change at every access, and the dataset "
                                      "keeps no data ddpcheck can read: shared or per-rank data cannot be told "
                                      "apart", epoch=epoch)
        elif excess > 0:
            everything = all(len(set(v)) == distinct for v in drawn.values())
            what = ("every rank read the whole dataset" if everything
                    else f"{len(shared)} indices were read by more than one rank")
            varying = (" Their batches differ only by what is random at every access (augmentation): the "
                       "samples behind them are the same." if same_data == "varying" else "")
            out[NO_SAMPLER] = Verdict(
                NO_SAMPLER, FAIL, f"{label} uses {info['sampler']}: {what}",
                message=f"{label} has no DistributedSampler (it uses {info['sampler']}), so {what} "
                f"in training {where} ({total} samples drawn for {distinct} distinct; e.g. indices {example}). "
                f"The ranks train on the same data and the job is no faster than one process.{varying} Pass "
                "sampler=DistributedSampler(dataset) (and shuffle=False to the DataLoader).",
                ranks=share_ranks, epoch=epoch, **place,
                details={"loader": label, "drawn": total, "distinct": distinct, "examples": shared[:10],
                         "evidence": same_data})
        else:
            out[NO_SAMPLER] = Verdict(NO_SAMPLER, PASS, f"{label}: ranks draw disjoint indices "
                                      f"({info['sampler']})", epoch=epoch)
        return out
    out[NO_SAMPLER] = Verdict(NO_SAMPLER, PASS, f"{label} uses DistributedSampler")
    replicas = info.get("num_replicas") or world
    pad = (-n) % replicas if n and not info.get("sampler_drop_last") else 0
    if excess > pad:
        out[OVERLAP] = Verdict(
            OVERLAP, FAIL, f"{label}: {excess} indices drawn by more than one rank in {where}",
            message=f"{label}: {len(shared)} dataset indices were drawn by more than one rank in "
            f"{where} (ranks {','.join(map(str, share_ranks))}; e.g. {example}); DistributedSampler's "
            f"padding explains at most {pad}. The sampler's num_replicas/rank do not match the "
            f"launcher (sampler says num_replicas={info.get('num_replicas')}, "
            f"rank={info.get('sampler_rank')} on the first rank): build it with the defaults or "
            "with get_world_size()/get_rank().", ranks=share_ranks, epoch=epoch, **place,
            details={"loader": label, "overlap": len(shared), "padding": pad, "examples": shared[:10]})
    else:
        pad_note = f", {excess} padding repeats" if excess else ""
        out[OVERLAP] = Verdict(OVERLAP, PASS, f"{label}: disjoint shards, coverage {coverage}{pad_note}",
                               epoch=epoch, details={"padding": excess})
    if complete and n:
        allowed = (n % replicas if info.get("sampler_drop_last") else 0)
        if info.get("drop_last") and info.get("batch_size"):
            allowed += world * (info["batch_size"] - 1)
        missing = n - distinct
        if missing > allowed:
            out[COVERAGE] = Verdict(
                COVERAGE, FAIL, f"{label}: {missing} of {n} samples never drawn in {where}",
                message=f"{label}: {missing} of {n} samples were drawn by no rank in complete {where} "
                f"(drop_last explains at most {allowed}). Check the sampler's num_replicas.",
                epoch=epoch, severity="warning", **place, details={"loader": label, "missing": missing})
        else:
            out[COVERAGE] = Verdict(COVERAGE, PASS, f"{label}: {coverage} samples drawn in {where}",
                                    epoch=epoch)
    return out


PROBE = Probe(NAME, (MissingDistributedSampler, OverlappingShards, ShardCoverageGap), judge, capture, order=30)
