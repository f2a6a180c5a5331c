"""DDP002 when a rank guard keeps some ranks out of training: a set_epoch under the same guard as
the loader it serves is called by every rank that draws from the sampler; one under a guard the
loader does not share is not. Each through `ddpcheck lint` on a small script."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

# Rank 0 only joins the group and waits; the other ranks build the sampler and train.
SCRIPT = """\
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def run_training(rank, world_size, model, train_set, epochs=2):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        if rank == 0:
            dist.barrier()
            dist.destroy_process_group()
            return
        ddp_model = DDP(model)
        sampler = DistributedSampler(dataset=train_set, num_replicas=world_size - 1, rank=rank - 1, shuffle=True)
        loader = DataLoader(train_set, batch_size=64, sampler=sampler)
        for ep in range(epochs):
{set_epoch}
            for x, y in loader:
                ddp_model(x).sum().backward()
        dist.barrier()
        dist.destroy_process_group()
"""


def findings(tmp_path: Path, set_epoch: str) -> list[int]:
    source = SCRIPT.replace("{set_epoch}", set_epoch)
    return [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP002")]


def test_set_epoch_after_the_rank_guard_that_also_keeps_the_loader_is_not_reported(tmp_path):
    assert findings(tmp_path, "            sampler.set_epoch(ep)") == []


def test_set_epoch_only_one_of_the_training_ranks_calls_is_still_reported(tmp_path):
    assert findings(tmp_path, "            if rank == 1:\n                sampler.set_epoch(ep)") == [16]


def test_no_set_epoch_at_all_is_reported_at_the_epoch_loop(tmp_path):
    assert findings(tmp_path, "            pass") == [16]
