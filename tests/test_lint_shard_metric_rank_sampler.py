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


# A running metric object fed in the loop; its figures are unpacked from one `compute()`.
METER = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    class TokenMetric:
        def __init__(self):
            self.correct = 0
            self.total = 0
            self.loss = 0.0

        def update(self, logits, gold, loss):
            self.correct += (logits.argmax(-1) == gold).sum().item()
            self.total += gold.numel()
            self.loss += loss

        def compute(self):
            return self.loss / max(self.total, 1), self.correct / max(self.total, 1)


    def validate(model, val_set, writer, step):
        loader = DataLoader(val_set, batch_size=32, sampler=DistributedSampler(val_set, shuffle=False))
        metric = TokenMetric()
        with torch.no_grad():
            for src, tgt in loader:
                logits = model(src.cuda())
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.cuda().flatten())
                metric.update(logits, tgt.cuda(), loss.item())
        loss_per_word, accuracy = metric.compute()
        if dist.get_rank() == 0:
            writer.add_scalar("valid/accuracy", accuracy, step)
    """


def test_figures_unpacked_from_a_meter_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"validate.py": METER})
    assert finding_set(tmp_path, "validate.py", select="DDP036") == {("validate.py", 31, "DDP036")}


def test_meter_that_reduces_in_compute_clean(tmp_path: Path) -> None:
    synced = METER.replace(
        "        def compute(self):\n",
        "        def compute(self):\n"
        "            stats = torch.tensor([self.loss, self.correct, self.total], device=\"cuda\")\n"
        "            dist.all_reduce(stats)\n"
        "            self.loss, self.correct, self.total = stats.tolist()\n")
    write_project(tmp_path, {"validate.py": synced})
    assert finding_set(tmp_path, "validate.py", select="DDP036") == set()
