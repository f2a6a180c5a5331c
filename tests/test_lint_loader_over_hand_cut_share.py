"""A training DataLoader over data each rank has already cut to its own share by hand (a
two-bound rank slice, a strided slice, the rank's piece of a split), through `ddpcheck lint`
(DDP001): such a loader needs no DistributedSampler. A cut that does not depend on the rank,
or a one-sided one, leaves every rank reading the same data and is still reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

HEAD = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def train_epoch(model, optimizer, data, batch_size):
    loader = DataLoader(data, batch_size=batch_size, shuffle=False)
    for batch in loader:
        optimizer.zero_grad()
        model(batch.float()).sum().backward()
        optimizer.step()


"""

TAIL = """
    model = DDP(torch.nn.Linear(16, 1).cuda(), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_epoch(model, optimizer, data, 32)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = torch.cuda.device_count()
    mp.spawn(worker, args=(n, 3), nprocs=n)
"""


def _script(body: str) -> str:
    return HEAD + """\
def worker(rank, world_size, epochs):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    data = torch.load("tokens.pt")
""" + body + TAIL


# The slice is taken only when a rank is given: the other arm is the single-process run.
BOUNDED_BY_RANK = _script("""\
    if rank is not None:
        per_rank = len(data) // world_size
        data = data[rank * per_rank:(rank + 1) * per_rank]
""")

STRIDED_BY_RANK = _script("""\
    data = data[rank::world_size]
""")

SPLIT_PIECE_IN_A_DATASET = _script("""\
    piece = torch.chunk(data, world_size)[rank]
    data = TensorDataset(piece)
""")

# Every rank keeps the same first rows: not a share.
SAME_HEAD_ON_EVERY_RANK = _script("""\
    data = data[:10000]
""")

# Only a lower bound: rank 0 reads everything, the others nearly everything.
ONE_SIDED_RANK_CUT = _script("""\
    data = data[rank:]
""")


def _found(tmp_path, source):
    write_project(tmp_path, {"train.py": source})
    return finding_set(tmp_path, "train.py", select="DDP001")


def test_loader_over_a_rank_bounded_slice_needs_no_sampler(tmp_path):
    assert _found(tmp_path, BOUNDED_BY_RANK) == set()


def test_loader_over_a_rank_strided_slice_needs_no_sampler(tmp_path):
    assert _found(tmp_path, STRIDED_BY_RANK) == set()


def test_loader_over_a_dataset_of_the_rank_split_piece_needs_no_sampler(tmp_path):
    assert _found(tmp_path, SPLIT_PIECE_IN_A_DATASET) == set()


def test_loader_over_a_slice_every_rank_takes_alike_is_reported(tmp_path):
    assert _found(tmp_path, SAME_HEAD_ON_EVERY_RANK) == {("train.py", 9, "DDP001")}


def test_loader_over_a_one_sided_rank_slice_is_reported(tmp_path):
    assert _found(tmp_path, ONE_SIDED_RANK_CUT) == {("train.py", 9, "DDP001")}
