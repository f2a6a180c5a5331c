"""A shuffling DistributedSampler that yields the same order in consecutive epochs: `set_epoch` is
never called, so every epoch reuses epoch 0's permutation. Uses the index capture of shards.py."""

from __future__ import annotations

from ddpcheck.run.probes.shards import HEAD, capture, loader_label, loaders_by_index
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

PROBE = "set-epoch"
CODE = "DDP103"


def install(session) -> None:
    capture(session)


def _same_order(a: dict, b: dict) -> bool:
    if a["complete"] and b["complete"] and a["count"] == b["count"]:
        return a["crc"] == b["crc"]
    n = min(len(a["head"]), len(b["head"]), HEAD)
    return n >= 4 and a["head"][:n] == b["head"][:n]


def _sequences(records: list[dict]):
    """(first loader info, {rank: epochs in order}) per creation site: a script that builds a new
    DataLoader every epoch at the same line gives one sequence of epochs too."""
    by_site: dict = {}
    for index, per_rank in sorted(loaders_by_index(records).items()):
        info = per_rank[min(per_rank)]
        if not (info.get("distributed") and info.get("shuffle")):
            continue
        key = info.get("site") or f"#{index}"
        first, epochs = by_site.setdefault(key, (info, {}))
        for rank, i in per_rank.items():
            epochs.setdefault(rank, []).extend(i["epochs"])
    return list(by_site.values())


def judge(records: list[dict], ctx: Context) -> list[Verdict]:
    candidates = 0
    for info, per_rank in _sequences(records):
        if min(len(e) for e in per_rank.values()) < 2:
            continue
        candidates += 1
        for rank, epochs in sorted(per_rank.items()):
            for e in range(len(epochs) - 1):
                if _same_order(epochs[e], epochs[e + 1]):
                    label = loader_label(info)
                    return [Verdict(CODE, FAIL, f"{label}: epochs {e} and {e + 1} in the same order",
                                    message=f"{label}: its shuffling DistributedSampler gave the same "
                                    f"order in epochs {e} and {e + 1} (sampler.epoch stayed "
                                    f"{epochs[e + 1]['sampler_epoch']}): set_epoch() is not called, "
                                    "so every epoch repeats the first shuffle. Call "
                                    "loader.sampler.set_epoch(epoch) at the start of each epoch.",
                                    ranks=tuple(sorted(per_rank)), epoch=e + 1,
                                    details={"loader": label})]
    if not candidates:
        return [Verdict(CODE, SKIP, "no shuffling DistributedSampler iterated twice")]
    return [Verdict(CODE, PASS, f"order changes every epoch ({candidates} loader(s))")]
