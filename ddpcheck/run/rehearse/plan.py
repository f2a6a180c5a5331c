"""Which ranks a rehearsal runs, and the data shards of every rank computed without running them.
Torch-free: the launcher and the judge both use it.

`DistributedSampler`'s indices are a function of (dataset length, world size, rank, epoch, seed,
shuffle, drop_last): how many samples each rank draws, and how many of them are padding (indices
repeated from the start), follow from the length alone. A rehearsal runs five ranks of a world of
512, but judges the shards of all 512.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


MAX_WORLD_SIZE = 1 << 20


def representatives(world_size: int, nproc: int) -> tuple[int, ...]:
    """Rank 0, rank 1, a middle rank, the first rank of the last node and the last rank: the ranks
    where code that confuses local and global ranks, or splits data by rank, goes wrong first."""
    last_node_first = ((world_size - 1) // max(nproc, 1)) * max(nproc, 1)
    chosen = {0, 1, world_size // 2, last_node_first, world_size - 1}
    return tuple(sorted(r for r in chosen if 0 <= r < world_size))


@dataclass(frozen=True)
class Placement:
    """Where a rank sits on the cluster, as torchrun numbers it."""

    rank: int
    world_size: int
    nproc: int

    @property
    def node(self) -> int:
        return self.rank // self.nproc

    @property
    def local_rank(self) -> int:
        return self.rank % self.nproc

    @property
    def nodes(self) -> int:
        return math.ceil(self.world_size / self.nproc)

    @property
    def local_world_size(self) -> int:
        """GPUs on this rank's node (the last node may hold fewer ranks)."""
        return min(self.nproc, self.world_size - self.node * self.nproc)

    def environment(self) -> dict[str, str]:
        """What torchrun sets in a worker at this place of the job."""
        return {
            "RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node), "GROUP_WORLD_SIZE": str(self.nodes),
            "ROLE_RANK": str(self.rank), "ROLE_WORLD_SIZE": str(self.world_size), "ROLE_NAME": "default",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "ddpcheck-rehearsal", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
        }


@dataclass(frozen=True)
class SamplerShards:
    """The shard sizes a DistributedSampler gives every rank (torch/utils/data/distributed.py)."""

    dataset_len: int
    num_replicas: int
    drop_last: bool

    @property
    def per_rank(self) -> int:
        n, w = self.dataset_len, self.num_replicas
        if self.drop_last and n % w != 0:
            return math.ceil((n - w) / w)
        return math.ceil(n / w)

    @property
    def padding(self) -> int:
        """Indices repeated from the start so that every rank gets `per_rank` (drop_last=False)."""
        return max(self.per_rank * self.num_replicas - self.dataset_len, 0)

    def padded_only(self) -> tuple[int, int] | None:
        """The ranks (first, last) whose every sample is padding: a repeat of another rank's, when
        the dataset has fewer samples than ranks."""
        if self.drop_last or self.dataset_len >= self.num_replicas or self.dataset_len == 0:
            return None
        return self.dataset_len, self.num_replicas - 1


def strided_shard(dataset_len: int, world_size: int, rank: int) -> int:
    """Samples of rank `rank` under `range(rank, n, world)` / `indices[rank::world]`."""
    return len(range(rank, dataset_len, world_size))


def batches(samples: int, batch_size: int | None, drop_last: bool) -> int:
    """What `len(DataLoader)` is for this many samples."""
    if not batch_size:
        return samples
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 500, 501, ..., 511] → '0, 1, 500–511'."""
    out: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{ordered[i]}–{ordered[j]}")
        else:
            out.extend(str(r) for r in ordered[i:j + 1])
        i = j + 1
    return ", ".join(out)
