"""What the ranks' datasets contain, beyond the indices their samplers draw: shared indices do not
mean shared data when each rank makes its own (random tensors seeded by rank, or not seeded at
all, so every process starts from its own default seed; a split made by hand). Two kinds of
evidence, both recorded per data loader in the shards probe's records (shards.py):

- `samples`: for the first SAMPLES indices a pass draws, a digest of the sample each index
  produced (its row of every tensor of the collated batch). The same index giving the same
  sample on two ranks is the same data; giving a sample that is the same on one rank from one
  pass to the next but differs across ranks is per-rank data. A sample that changes from pass
  to pass (random augmentation, or data generated at every access) says nothing either way.
- `stored`: digests of the data the dataset object keeps (tensors, arrays, sequences of plain
  values such as file names or a Subset's indices), walked through its attributes a few levels
  deep. Different on the ranks: each rank holds its own data; the same: the ranks hold the same
  data (their batches may still differ by random augmentation). Nothing found (the data lives in
  files opened later, or in objects we cannot read): no evidence.

The capture half imports torch lazily; the judging half is torch-free.
"""

from __future__ import annotations

import zlib
from typing import Any

SAMPLES = 64  # indices per pass whose samples are fingerprinted
MAX_NODES = 2_000  # objects visited per dataset walk
MAX_ITEMS = 64  # items of a sequence of objects that the walk visits
PLAIN_SAMPLE = 1_000  # items of a sequence of plain values that its digest reads (start, middle, end)
_PLAIN = (str, bytes, int, float, bool, type(None))


# --- in the rank ----------------------------------------------------------------------------------

def row_digests(batch: Any, n: int) -> list[int] | None:
    """One digest per sample of a collated batch of `n` samples (None when the batch cannot be
    split into its samples)."""
    import torch

    from ddpcheck.run.rank.fingerprint import fingerprints

    tensors: list[Any] = []
    plain: list[list[Any]] = []

    def walk(item: Any, depth: int) -> bool:
        if depth > 6:
            return False
        if isinstance(item, torch.Tensor):
            if item.dim() == 0 or item.shape[0] != n:
                return False
            tensors.append(item)
            return True
        if isinstance(item, dict):
            return all(walk(item[k], depth + 1) for k in sorted(item, key=str))
        if isinstance(item, (list, tuple)):
            if len(item) == n and all(isinstance(x, _PLAIN) for x in item):
                plain.append(list(item))
                return True
            return all(walk(x, depth + 1) for x in item)
        return isinstance(item, _PLAIN)  # a value shared by the whole batch

    if n < 1 or not walk(batch, 0) or not (tensors or plain):
        return None
    out = []
    for k in range(n):
        pairs = fingerprints(t[k] for t in tensors)
        digest = zlib.crc32(repr([list(p) for p in pairs]).encode())
        if plain:
            digest = zlib.crc32(repr([column[k] for column in plain]).encode(), digest)
        out.append(digest)
    return out


def stored_content(dataset: Any) -> list[list[Any]]:
    """[[where, digest], ...] for the data a dataset object keeps, in attribute order."""
    import torch

    from ddpcheck.run.rank.fingerprint import tensor_digest

    out: list[list[Any]] = []
    seen: set[int] = set()
    budget = [MAX_NODES]

    def plain_digest(values: Any) -> int:
        size = len(values)
        if size <= PLAIN_SAMPLE:
            picked = list(values)
        else:
            third = PLAIN_SAMPLE // 3
            middle = size // 2
            picked = [*values[:third], *values[middle:middle + third], *values[-third:]]
        return zlib.crc32(repr((size, picked)).encode())

    def walk(obj: Any, where: str, depth: int) -> None:
        budget[0] -= 1
        if budget[0] < 0 or id(obj) in seen or isinstance(obj, _PLAIN) or callable(obj) and not hasattr(obj, "__len__"):
            return
        if isinstance(obj, torch.Tensor):
            out.append([where, tensor_digest(obj)])
            return
        kind = type(obj)
        module = getattr(kind, "__module__", "") or ""
        if module == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "tobytes"):
            try:
                out.append([where, tensor_digest(torch.from_numpy(obj))])
            except (TypeError, RuntimeError, ValueError):
                out.append([where, plain_digest(obj.ravel().tolist())])
            return
        if module.startswith(("numpy.random", "random")) or isinstance(obj, torch.Generator):
            return  # random number generators: not data
        seen.add(id(obj))
        if isinstance(obj, (list, tuple, range)):
            if len(obj) >= 2 and all(isinstance(x, _PLAIN) for x in obj[:PLAIN_SAMPLE]):
                out.append([where, plain_digest(obj)])
                return
            if depth < 5:
                step = max(1, len(obj) // MAX_ITEMS)
                for i in range(0, len(obj), step):
                    walk(obj[i], f"{where}[{i}]", depth + 1)
            return
        if isinstance(obj, dict):
            if depth < 5:
                for key in sorted(obj, key=str)[:MAX_ITEMS]:
                    walk(obj[key], f"{where}[{key!r}]", depth + 1)
            return
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict) and depth < 4:
            for key in sorted(attrs):
                if not key.startswith("__"):
                    walk(attrs[key], f"{where}.{key}", depth + 1)

    try:
        walk(dataset, "dataset", 0)
    except Exception:  # noqa: BLE001 - a dataset we cannot read gives no evidence, never an error
        return []
    return out


# --- in the launcher ------------------------------------------------------------------------------

SAME, PER_RANK, UNKNOWN = "same", "per-rank", "unknown"
VARYING = "varying"  # the same index gave other samples on other ranks, and changes at every access


def stored_verdict(per_rank: dict[int, dict[str, Any]]) -> str:
    """SAME, PER_RANK or UNKNOWN from the datasets' stored content on every rank."""
    stored = {r: i.get("stored") for r, i in per_rank.items()}
    if any(not s for s in stored.values()):
        return UNKNOWN
    values = {repr(s) for s in stored.values()}
    return SAME if len(values) == 1 else PER_RANK


def _samples(epoch: dict[str, Any]) -> dict[int, int]:
    return {int(k): int(v) for k, v in (epoch.get("samples") or {}).items()}


def sample_verdict(per_rank: dict[int, dict[str, Any]], epochs: list[int]) -> str:
    """SAME, PER_RANK, VARYING or UNKNOWN from the samples the ranks drew at the same indices in
    the given passes (positions in each rank's list of passes)."""
    same = differ = 0
    for e in epochs:
        drawn = {r: _samples(i["epochs"][e]) for r, i in per_rank.items() if e < len(i["epochs"])}
        ranks = sorted(drawn)
        for a_i, a in enumerate(ranks):
            for b in ranks[a_i + 1:]:
                for index in set(drawn[a]) & set(drawn[b]):
                    if drawn[a][index] == drawn[b][index]:
                        same += 1
                    else:
                        differ += 1
    if same + differ == 0:
        return UNKNOWN
    if same * 2 > same + differ:
        return SAME
    if same:
        return UNKNOWN
    # Every shared index gave another sample on another rank: per-rank data if each rank's own
    # samples are stable from pass to pass, else random at every access (augmentation).
    return {True: PER_RANK, False: VARYING}.get(stable(per_rank), UNKNOWN)  # type: ignore[arg-type]


def stable(per_rank: dict[int, dict[str, Any]]) -> bool | None:
    """True when every rank's samples at an index repeat from one pass to the next; False when
    they change (random augmentation or generated at each access); None: no index seen twice."""
    repeat = change = 0
    for info in per_rank.values():
        seen: dict[int, int] = {}
        for epoch in info["epochs"]:
            for index, digest in _samples(epoch).items():
                if index in seen:
                    repeat += seen[index] == digest
                    change += seen[index] != digest
                else:
                    seen[index] = digest
    if repeat + change == 0:
        return None
    return change == 0
