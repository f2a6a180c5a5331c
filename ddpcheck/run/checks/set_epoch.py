"""A shuffling DistributedSampler that yields the same order in consecutive epochs: `set_epoch` is
never called, so every epoch reuses epoch 0's permutation. Uses the index capture of _loader_indices.py.

An epoch is a training pass over the loader (one during which an optimizer step was taken): a
peek at one batch before `set_epoch` (it draws in the previous epoch's order), a warm-up batch or
an evaluation pass over the training set in the same epoch are not epochs of their own. Two
passes whose optimizers train different models (one way, then another, on the same data on
purpose) are not one run's consecutive epochs. Two
consecutive training passes fail when their order is the same and the sampler's epoch did not
change between them."""

from __future__ import annotations

from typing import Any

from ddpcheck.run.checks._loader_indices import HEAD, capture, is_training, loader_label, loader_place, loaders_by_index
from ddpcheck.run.records import Record
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, plural
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck


class MissingSetEpoch(RuntimeCheck):
    """A shuffling DistributedSampler yields the same order every epoch: `set_epoch` is not called.

    ## Why it matters

    `DistributedSampler` seeds its shuffle with `seed + epoch`, and its epoch only changes through
    `set_epoch()`. Without the call every epoch replays the first permutation, so the model sees
    the batches in the same order each epoch, which hurts convergence quietly. ddpcheck compares
    the index order of consecutive epochs.

    ## How to fix

    Call `loader.sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP103"
    name = "same-shuffle-every-epoch"
    severity = Severity.WARNING
    INVALID = ("""
        for epoch in range(epochs):
            for x, y in loader:
                ...
    """,)
    VALID = ("""
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """,)


NAME = "set-epoch"


def _same_order(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a["complete"] and b["complete"] and a["count"] == b["count"]:
        return bool(a["crc"] == b["crc"])
    n = min(len(a["head"]), len(b["head"]), HEAD)
    return n >= 4 and a["head"][:n] == b["head"][:n]


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two passes trained the same run: a pass whose last optimizer step trained another
    model than the other's (a script that trains one way, then another, on the same loader with
    the same order on purpose) is not. Records without the key: the same run."""
    if a.get("trained") is None or b.get("trained") is None:
        return True
    return bool(a["trained"] == b["trained"])


def _sequences(records: list[Record]) -> list[tuple[dict[str, Any], dict[int, list[dict[str, Any]]]]]:
    """(first loader info, {rank: epochs in order}) per creation site: a script that builds a new
    DataLoader every epoch at the same line gives one sequence of epochs too."""
    by_site: dict[str, tuple[dict[str, Any], dict[int, list[dict[str, Any]]]]] = {}
    for index, per_rank in sorted(loaders_by_index(records).items()):
        info = per_rank[min(per_rank)]
        if not (info.get("distributed") and info.get("shuffle")):
            continue
        key = info.get("site") or f"#{index}"
        first, epochs = by_site.setdefault(key, (info, {}))
        for rank, i in per_rank.items():
            epochs.setdefault(rank, []).extend(e for e in i["epochs"] if is_training(e))
    return list(by_site.values())


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    candidates = 0
    for info, per_rank in _sequences(records):
        if min(len(e) for e in per_rank.values()) < 2:
            continue
        candidates += 1
        for rank, epochs in sorted(per_rank.items()):
            for e in range(len(epochs) - 1):
                a, b = epochs[e], epochs[e + 1]
                moved = a.get("sampler_epoch") is not None and a.get("sampler_epoch") != b.get("sampler_epoch")
                if not moved and _same_run(a, b) and _same_order(a, b):
                    label = loader_label(info)
                    stayed = (f" (sampler.epoch stayed {b['sampler_epoch']})"
                              if b.get("sampler_epoch") is not None else "")
                    return [Verdict(MissingSetEpoch.code, FAIL, f"{label}: epochs {e} and {e + 1} in the same order",
                                    message=f"{label}: its shuffling DistributedSampler gave the same "
                                    f"order in training epochs {e} and {e + 1}{stayed}: set_epoch() is "
                                    "not called, so every epoch repeats the first shuffle. Call "
                                    "loader.sampler.set_epoch(epoch) at the start of each epoch.",
                                    ranks=tuple(sorted(per_rank)), epoch=e + 1, **loader_place(info),
                                    details={"loader": label})]
    if not candidates:
        return [Verdict(MissingSetEpoch.code, SKIP, "no shuffling DistributedSampler trained on for two epochs")]
    return [Verdict(MissingSetEpoch.code, PASS, f"order changes every epoch ({plural(candidates, 'loader')})")]


PROBE = Probe(NAME, (MissingSetEpoch,), judge, capture, order=40)
