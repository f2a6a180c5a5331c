"""A padding evaluation sampler whose loader drops its last partial batch, through `ddpcheck
lint` (DDP018): the padding's repeats are the last indices of the last ranks' shards, so a
loader with `drop_last=True` and batches of several samples drops them with the partial batch.
With batches of one sample nothing is partial, and the repeats count."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    @torch.no_grad()
    def evaluate(model, loader):
        correct = torch.zeros(2, device="cuda")
        for x, y in loader:
            correct[0] += (model(x.cuda()).argmax(1) == y.cuda()).sum()
            correct[1] += y.numel()
        dist.all_reduce(correct)
        return (correct[0] / correct[1]).item()


    def main(model, val_set, batch_size):
        dist.init_process_group("nccl")
        val_sampler = DistributedSampler(val_set, shuffle=False)
        val_loader = DataLoader(val_set, batch_size=BATCH, sampler=val_sampler, drop_last=True)
        print(evaluate(model, val_loader))
    """


def _lint(tmp_path: Path, batch: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"main.py": SCRIPT.replace("BATCH", batch)})
    return finding_set(tmp_path, "main.py", select="DDP018")


def test_a_loader_dropping_its_partial_last_batch_drops_the_repeats(tmp_path: Path) -> None:
    assert _lint(tmp_path, "2 * batch_size") == set()


def test_batches_of_one_sample_keep_the_repeats(tmp_path: Path) -> None:
    assert _lint(tmp_path, "1") == {("main.py", 18, "DDP018")}
