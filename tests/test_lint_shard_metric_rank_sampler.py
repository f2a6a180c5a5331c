"""An evaluation loop over a loader whose batch sampler is a project class built for one rank
(the batches sliced `[rank::world_size]`), through `ddpcheck lint` (DDP036): a shard as a
DistributedSampler's, so the loss summed over it and logged unreduced is reported; the same
loader with a sampler that takes no rank, or a loss all-reduced before it is logged, stays
clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

DATA = """\
    import random

    from torch.utils.data import DataLoader, Sampler


    class BucketBatchSampler(Sampler):
        def __init__(self, buckets, batch_size, shuffle=True):
            self.batches = [b[i:i + batch_size] for b in buckets for i in range(0, len(b), batch_size)]
            self.shuffle = shuffle

        def __iter__(self):
            order = list(self.batches)
            if self.shuffle:
                random.shuffle(order)
            yield from order

        def __len__(self):
            return len(self.batches)


    class RankBucketBatchSampler(BucketBatchSampler):
        def __init__(self, buckets, batch_size, world_size, rank, shuffle=True):
            super().__init__(buckets, batch_size, shuffle)
            self.batches = self.batches[rank::world_size]


    def make_loader(dataset, buckets, batch_size, wrld_size=None, rank=None):
        if wrld_size is None or rank is None:
            sampler = BucketBatchSampler(buckets, batch_size)
        else:
            sampler = {sampler}
        return DataLoader(dataset, batch_sampler=sampler)
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    import wandb
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import make_loader


    @torch.no_grad()
    def evaluate(model, loader, loss_fn, device):
        model.eval()
        total_loss = 0.0
        for batch in loader:
            logits = model(batch["src"].to(device), batch["tgt_in"].to(device))
            total_loss += loss_fn(logits.flatten(0, 1), batch["tgt_out"].to(device).flatten()).item()
        {reduce}val_loss = total_loss / len(loader)
        wandb.log({{"val_loss": val_loss}})


    def main():
        dist.init_process_group("nccl")
        rank, world_size = dist.get_rank(), dist.get_world_size()
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        val_set, val_buckets = load_split("validation")
        val_loader = make_loader(val_set, val_buckets, 32, wrld_size=world_size, rank=rank)
        model = DDP(build_model().to(device))
        loss_fn = torch.nn.CrossEntropyLoss()
        for epoch in range(20):
            train_one_epoch(model, epoch)
            evaluate(model, val_loader, loss_fn, device)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

RANK_SAMPLER = "RankBucketBatchSampler(buckets, batch_size, wrld_size, rank)"


def test_loss_over_a_rank_sliced_batch_sampler_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"data.py": DATA.format(sampler=RANK_SAMPLER), "train.py": TRAIN.format(reduce="")})
    assert finding_set(tmp_path, "train.py", select="DDP036") == {("train.py", 19, "DDP036")}


def test_sampler_without_a_rank_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"data.py": DATA.format(sampler="BucketBatchSampler(buckets, batch_size)"),
                             "train.py": TRAIN.format(reduce="")})
    assert finding_set(tmp_path, "train.py", select="DDP036") == set()


def test_loss_all_reduced_before_logging_clean(tmp_path: Path) -> None:
    reduced = TRAIN.format(reduce=(
        "stats = torch.tensor([total_loss, len(loader)], device=device)\n"
        "        dist.all_reduce(stats)\n"
        "        total_loss = stats[0].item() / stats[1].item() * len(loader)\n"
        "        "))
    write_project(tmp_path, {"data.py": DATA.format(sampler=RANK_SAMPLER), "train.py": reduced})
    assert finding_set(tmp_path, "train.py", select="DDP036") == set()
