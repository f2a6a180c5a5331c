"""An evaluation loop that runs the step helper it shares with training (the helper steps the
optimizer only when it is handed one), through `ddpcheck lint` (DDP036): the call leaves the
helper's backward out, so the loop evaluates, and the per-rank mean loss it returns, logged
by rank 0 with `mlflow.log_metric`, is one shard's figure. The same helper handed the
optimizer trains, and an evaluation that all-reduces its loss is clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

STEP = """\
    import torch


    def run_step(model, batch, criterion, *, optim=None):
        model.train(optim is not None)
        x, y = batch
        loss = criterion(model(x.cuda()).squeeze(1), y.cuda())
        if optim is not None:
            optim.zero_grad()
            loss.backward()
            optim.step()
        return loss
    """

LOOP = """\
    import mlflow
    import torch
    import torch.distributed as dist

    from step import run_step


    def fit(model, dl_train, dl_val, epochs):
        rank = dist.get_rank()
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
        criterion = torch.nn.MSELoss()
        for ep in range(epochs):
            dl_train.sampler.set_epoch(ep)
            for batch in dl_train:
                run_step(model, batch, criterion, optim=optim)
            val_loss = evaluate(model, dl_val, criterion)
            if rank == 0:
                mlflow.log_metric("val_loss", val_loss, step=ep)


    @torch.no_grad()
    def evaluate(model, dl, criterion):
        losses = []
        for batch in dl:
            loss = run_step(model, batch, criterion)
            losses.append(loss.item())
        RETURN
    """

MAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from loop import fit


    def main(train_set, val_set):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
        train_loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))
        fit(model, train_loader, val_loader, 3)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(None, None)
    """

PER_RANK_MEAN = "return sum(losses) / len(losses)"
REDUCED_MEAN = """mean = torch.tensor(sum(losses) / len(losses), device="cuda")
        dist.all_reduce(mean)
        return mean.item() / dist.get_world_size()"""


def _lint(tmp_path: Path, returned: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"step.py": STEP, "loop.py": LOOP.replace("RETURN", returned), "main.py": MAIN})
    return finding_set(tmp_path, "main.py", select="DDP036")


def test_a_shared_step_run_without_an_optimizer_evaluates_and_its_mean_is_one_shard_s(tmp_path: Path) -> None:
    assert _lint(tmp_path, PER_RANK_MEAN) == {("loop.py", 18, "DDP036")}


def test_the_shared_step_s_evaluation_mean_all_reduced_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, REDUCED_MEAN) == set()


def test_the_shared_step_handed_the_optimizer_trains_and_its_loss_is_not_a_metric(tmp_path: Path) -> None:
    # The training loop keeps its per-batch losses and rank 0 logs their mean: one rank's
    # training loss, by design.
    loop = LOOP.replace("""            for batch in dl_train:
                run_step(model, batch, criterion, optim=optim)
""", """            train_losses = []
            for batch in dl_train:
                train_losses.append(run_step(model, batch, criterion, optim=optim).item())
            if rank == 0:
                mlflow.log_metric("train_loss", sum(train_losses) / len(train_losses), step=ep)
""")
    assert "train_losses" in loop
    write_project(tmp_path, {"step.py": STEP, "loop.py": loop.replace("RETURN", REDUCED_MEAN), "main.py": MAIN})
    assert finding_set(tmp_path, "main.py", select="DDP036") == set()
