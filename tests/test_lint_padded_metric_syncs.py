"""A padded evaluation sampler whose metric a library gathers from every rank, through `ddpcheck
lint` (DDP018): torcheval's `sync_and_compute(metric)` counts the padding's repeats."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from torcheval.metrics import MulticlassAccuracy
    from torcheval.metrics.toolkit import sync_and_compute


    def test(model, loader, metric, device):
        model.eval()
        metric.reset()
        with torch.no_grad():
            for x, y in loader:
                metric.update(model(x.to(device)), y.to(device))
        return REDUCE


    def main(train_set, test_set):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        test_sampler = DistributedSampler(test_set, shuffle=False)
        test_loader = DataLoader(test_set, batch_size=250, sampler=test_sampler)
        model = DDP(torch.nn.Linear(8, 10).to(device), device_ids=[local_rank])
        metric = MulticlassAccuracy(device=device)
        accuracy = test(model, test_loader, metric, device)
        if dist.get_rank() == 0:
            print(f"accuracy {accuracy.item():.4f}")
        dist.destroy_process_group()
    """


def _lint(tmp_path: Path, reduce: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"main.py": TRAIN.replace("REDUCE", reduce)})
    return finding_set(tmp_path, "main.py", select="DDP018")


def test_a_metric_synced_over_padded_shards_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, "sync_and_compute(metric)") == {("main.py", 25, "DDP018")}


def test_a_metric_computed_on_the_ranks_own_shard_is_not_this_rules(tmp_path: Path) -> None:
    assert _lint(tmp_path, "metric.compute()") == set()
