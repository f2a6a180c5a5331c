"""Loaders handed out by a generator of the project (DDP002), on a mechanism seen on public
scripts of batch 22: a fine-tuning loop over data chunks whose `get_loaders` generator builds a
fresh shuffling DistributedSampler for each chunk, in every epoch. Each case runs `ddpcheck lint`
on a small project written in that style, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "finetune.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, target, select=select))


CHUNKS = """\
    import json
    import os
    import torch
    from torch.utils.data import DataLoader, Dataset, DistributedSampler, SequentialSampler


    class ChunkDataset(Dataset):
        def __init__(self, path):
            with open(path) as f:
                self.rows = [json.loads(line) for line in f]

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            row = self.rows[i]
            return torch.tensor(row["ids"]), torch.tensor(row["label"])


    def chunk_loaders(paths, args, eval=False):
        for path in paths:
            dataset = ChunkDataset(path)
            if eval:
                sampler = SequentialSampler(dataset)
            else:
                sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, sampler=sampler, batch_size=args.batch_size, num_workers=2)
            yield dataset, sampler, loader
"""

FINETUNE = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from chunks import chunk_loaders
    from net import Classifier


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--train_dir", required=True)
        parser.add_argument("--batch_size", type=int, default=16)
        parser.add_argument("--lr", type=float, default=3e-4)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(Classifier().cuda(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        files = sorted(os.path.join(args.train_dir, f) for f in os.listdir(args.train_dir))
        for epoch in range({epochs}):
            model.train()
            for _, {sampler}, train_loader in chunk_loaders(files, args):
                {set_epoch}
                for ids, labels in train_loader:
                    loss = torch.nn.functional.cross_entropy(model(ids.cuda()), labels.cuda())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

NET = """\
    import torch.nn as nn


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.EmbeddingBag(30000, 256)
            self.head = nn.Linear(256, 2)

        def forward(self, ids):
            return self.head(self.embed(ids))
"""


def _project(epochs: int = 30, sampler: str = "_", set_epoch: str = "pass") -> dict[str, str]:
    return {"finetune.py": FINETUNE.format(epochs=epochs, sampler=sampler, set_epoch=set_epoch),
            "chunks.py": CHUNKS, "net.py": NET}


def test_fresh_sampler_per_chunk_from_a_generator_reported_at_the_epoch_loop(tmp_path: Path) -> None:
    # Each epoch builds the chunks' samplers again at epoch 0: every epoch repeats their order.
    # The chunk loop itself is not the one that repeats (each pass is another chunk).
    assert lines(tmp_path, _project(), "DDP002") == [("finetune.py", 22)]


def test_set_epoch_on_the_yielded_sampler_is_clean(tmp_path: Path) -> None:
    project = _project(sampler="sampler", set_epoch="sampler.set_epoch(epoch)")
    assert lines(tmp_path, project, "DDP002") == []


def test_set_epoch_through_the_yielded_loader_is_clean(tmp_path: Path) -> None:
    project = _project(set_epoch="train_loader.sampler.set_epoch(epoch)")
    assert lines(tmp_path, project, "DDP002") == []


def test_one_epoch_over_the_chunks_is_clean(tmp_path: Path) -> None:
    # Read once, chunk by chunk: no order is repeated.
    assert lines(tmp_path, _project(epochs=1), "DDP002") == []


# A best-checkpoint test on each rank's own epoch loss, around a save helper whose barrier every
# rank that enters reaches (DDP009).
DIST_UTIL = """\
    import torch
    import torch.distributed as dist


    def is_main_process(rank):
        return rank == 0


    def save_checkpoint(state, path, rank):
        if is_main_process(rank):
            torch.save(state, path)
            dist.barrier()
        else:
            dist.barrier()
"""

DISTILL = """\
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dist_util import is_main_process, save_checkpoint as save_checkpoint_dist


    def train(student, teacher, loader, sampler, optimizer, rank, epochs, path):
        model = DDP(student, device_ids=[rank])
        best_loss = float("inf")
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            {reset}
            for texts, targets in loader:
                loss = torch.nn.functional.mse_loss(model(texts), teacher(texts))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                {collect}
            {aggregate}
            if avg_loss < best_loss:
                best_loss = avg_loss
                save_checkpoint_dist({{"model": model.module.state_dict()}}, path, rank)
                if is_main_process(rank):
                    print(f"saved {{best_loss:.4f}}")
"""

OWN_LIST = dict(reset="epoch_losses = []", collect="epoch_losses.append(loss.item())",
                aggregate="avg_loss = np.mean(epoch_losses)")


def _distill(**parts: str) -> dict[str, str]:
    return {"distill.py": DISTILL.format(**parts), "dist_util.py": DIST_UTIL}


def test_collective_helper_under_a_test_of_the_ranks_own_mean_loss(tmp_path: Path) -> None:
    assert lines(tmp_path, _distill(**OWN_LIST), "DDP009", "distill.py") == [("distill.py", 23)]


def test_collective_helper_under_a_test_of_the_ranks_own_running_total(tmp_path: Path) -> None:
    parts = dict(reset="total = 0.0", collect="total += loss.item()", aggregate="avg_loss = total / len(loader)")
    assert lines(tmp_path, _distill(**parts), "DDP009", "distill.py") == [("distill.py", 23)]


def test_loss_reduced_before_the_test_is_clean(tmp_path: Path) -> None:
    parts = dict(reset="epoch_losses = []", collect="epoch_losses.append(loss.item())",
                 aggregate="mean = torch.tensor(np.mean(epoch_losses), device=rank); "
                           "dist.all_reduce(mean); avg_loss = mean.item() / dist.get_world_size()")
    assert lines(tmp_path, _distill(**parts), "DDP009", "distill.py") == []


def test_losses_reduced_in_the_loop_are_clean(tmp_path: Path) -> None:
    # Each step's loss is all-reduced before it is kept: the mean is the same on every rank.
    parts = dict(reset="epoch_losses = []",
                 collect="dist.all_reduce(loss.detach()); epoch_losses.append(loss.item())",
                 aggregate="avg_loss = np.mean(epoch_losses)")
    assert lines(tmp_path, _distill(**parts), "DDP009", "distill.py") == []


def test_helper_without_a_collective_under_the_own_loss_test_is_clean(tmp_path: Path) -> None:
    files = _distill(**OWN_LIST)
    files["dist_util.py"] = DIST_UTIL.replace("            dist.barrier()\n        else:\n            dist.barrier()\n", "")
    assert lines(tmp_path, files, "DDP009", "distill.py") == []
