"""Evaluation passes: the data loader passes during which no optimizer step was taken (an
accuracy or validation loop, usually under `torch.no_grad()`), judged by what matters for
evaluation rather than by the training rules of shards.py. Uses the index capture of _loader_indices.py.

- every rank evaluates the whole dataset (no DistributedSampler): correct, but the same work on
  every rank;
- a DistributedSampler that pads the evaluation set (`drop_last=False` and a dataset size the
  world size does not divide): some samples are evaluated twice, and count twice in a metric
  combined across ranks;
- evaluation shards that overlap beyond that padding (a sampler built for another world size).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run.checks._loader_indices import (
    capture,
    decode,
    is_training,
    kept_slice,
    loader_label,
    loader_place,
    loaders_by_index,
)
from ddpcheck.run.records import Record
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, plural

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session


class EvaluationNotSharded(RuntimeCheck):
    """An evaluation pass that every rank makes over the whole dataset, or over a padded or overlapping shard.

    ## Why it matters

    An evaluation loop (accuracy, validation loss) takes no optimizer step, so it cannot make the
    ranks train on the same data; what can go wrong is milder. Without a `DistributedSampler`
    every rank evaluates every sample: the metric is right, but the work is done once per rank.
    With one, `drop_last=False` pads the last shard by repeating `(-len(dataset)) % world_size`
    samples from the start (torch/utils/data/distributed.py), so a metric summed across ranks
    counts those samples twice; a sampler built for another world size makes shards overlap and
    counts more samples twice. ddpcheck tells evaluation passes from training passes by the
    optimizer steps taken while the loader was read.

    ## How to fix

    Either evaluate on one rank only (`if rank == 0: evaluate(...)`), or shard the evaluation set
    with `DistributedSampler(dataset, shuffle=False)` and combine the per-rank counts with
    `dist.all_reduce`; when the world size does not divide the dataset, evaluate the remainder on
    one rank (or accept the few repeated samples).

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP115"
    name = "evaluation-not-sharded"
    severity = Severity.INFO
    INVALID = ("""
        test_loader = DataLoader(test_set, batch_size=64, shuffle=False)
        accuracy = evaluate(ddp_model, test_loader)  # every rank evaluates everything
    """,)
    VALID = ("""
        test_loader = DataLoader(test_set, batch_size=64, sampler=DistributedSampler(test_set, shuffle=False))
        correct, total = evaluate(ddp_model, test_loader)
        counts = torch.tensor([correct, total])
        dist.all_reduce(counts)
    """,)


NAME = "evaluation"


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    found: list[Verdict] = []
    judged = 0
    own = 0  # loaders whose ranks evaluate data of their own
    sliced = 0  # loaders whose every batch each rank cuts to its own share
    for _, per_rank in sorted(loaders_by_index(records).items()):
        if len(per_rank) < 2 or len(per_rank) < ctx.world_size:
            continue
        info = per_rank[min(per_rank)]
        if info.get("iterable") or info.get("opaque") or not info.get("dataset_len"):
            continue
        n = int(info["dataset_len"])
        count = min(len(i["epochs"]) for i in per_rank.values())
        passes = [e for e in range(count)
                  if all(not is_training(i["epochs"][e]) and i["epochs"][e].get("complete")
                         for i in per_rank.values())]
        if not passes:
            continue
        judged += 1
        e = passes[0]
        epochs = {r: i["epochs"][e] for r, i in per_rank.items()}
        label = loader_label(info)
        trains = any(is_training(x) for i in per_rank.values() for x in i["epochs"])
        what = "an evaluation pass over the training loader" if trains else "an evaluation pass"
        world = len(per_rank)
        if not info.get("distributed"):
            if _own_data(per_rank, passes):
                own += 1
            elif kept_slice(records, per_rank, world) is not None:
                sliced += 1  # the script keeps 1/world of each batch for the model (DLRM does)
            elif all(int(x["count"]) >= n for x in epochs.values()):
                found.append(Verdict(
                    EvaluationNotSharded.code, FAIL, f"{label}: every rank evaluates all {n} samples",
                    message=f"{label}: in {what} every rank read all {n} samples (it has no "
                    f"DistributedSampler), so the evaluation is done {world} times over. The result "
                    "is right; to share the work, shard it with DistributedSampler(dataset, "
                    "shuffle=False) and all_reduce the counts, or evaluate on one rank.",
                    ranks=tuple(sorted(per_rank)), **loader_place(info),
                    details={"loader": label, "samples": n, "pass": "evaluation"}))
            continue
        replicas = int(info.get("num_replicas") or world)
        pad = (-n) % replicas if not info.get("sampler_drop_last") else 0
        drawn = {r: decode(x["indices"]) for r, x in epochs.items() if x.get("indices")}
        excess = 0
        if len(drawn) == world:
            excess = sum(len(v) for v in drawn.values()) - len(set().union(*(set(v) for v in drawn.values())))
        if excess > pad:
            found.append(Verdict(
                EvaluationNotSharded.code, FAIL, f"{label}: {excess} samples evaluated by more than one rank",
                message=f"{label}: in {what} {excess} samples were evaluated by more than one rank "
                f"(DistributedSampler's padding explains {pad}): the sampler's num_replicas/rank do not "
                "match the job, and a metric combined across ranks counts them twice. Build the "
                "sampler with the defaults.", severity="warning", ranks=tuple(sorted(per_rank)),
                **loader_place(info), details={"loader": label, "repeated": excess, "padding": pad}))
        elif pad:
            found.append(Verdict(
                EvaluationNotSharded.code, FAIL, f"{label}: {pad} padding sample(s) evaluated twice",
                message=f"{label}: its DistributedSampler pads {n} samples to {n + pad} for {replicas} "
                f"ranks (drop_last=False), so in {what} {plural(pad, 'sample is', 'samples are')} evaluated "
                "twice, and a metric combined across ranks counts "
                f"{'it' if pad == 1 else 'them'} twice. Evaluate the remainder on one rank, or accept "
                "the small error.", ranks=tuple(sorted(per_rank)), **loader_place(info),
                details={"loader": label, "padding": pad}))
    if found:
        first = sorted(found, key=lambda v: (v.severity != "warning", v.detail))[0]
        if len(found) > 1:
            first = Verdict(first.code, first.status, f"{first.detail} (+{len(found) - 1} more)",
                            message=first.message, severity=first.severity, ranks=first.ranks,
                            path=first.path, line=first.line, details=first.details)
        return [first]
    if not judged:
        return [Verdict(EvaluationNotSharded.code, SKIP, "no evaluation pass on every rank")]
    sharded = judged - own - sliced
    said = [f"{plural(sharded, 'loader')} evaluated in shards without padding"] if sharded else []
    if own:
        said.append(f"{plural(own, 'loader')} with each rank's own data")
    if sliced:
        said.append(f"{plural(sliced, 'loader')} whose batches each rank cuts to its own 1/{ctx.world_size}")
    return [Verdict(EvaluationNotSharded.code, PASS, "; ".join(said))]


def _own_data(per_rank: dict[int, dict[str, Any]], passes: list[int]) -> bool:
    """The ranks evaluate their own data (the same index gives another sample on each rank)."""
    from ddpcheck.run.checks import _samples

    verdict = _samples.sample_verdict(per_rank, passes)
    if verdict == _samples.UNKNOWN or verdict == _samples.VARYING:
        verdict = _samples.stored_verdict(per_rank)
    return verdict == _samples.PER_RANK


def _capture(session: Session) -> None:
    capture(session)


PROBE = Probe(NAME, (EvaluationNotSharded,), judge, _capture, order=45)
