"""Evaluation counters of which only some are reduced across ranks, through `ddpcheck lint`
(DDP036): a collective reduces what it is handed, not every counter the loop kept, a barrier
reduces nothing, and a helper that logs what it is handed reports it even when it also returns
something."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

# The test loss is averaged across ranks at each step; the correlation accuracy summed beside it
# is not.
SEG_EVAL = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torch.utils.tensorboard import SummaryWriter


    def reduce_mean(t):
        rt = t.clone()
        dist.all_reduce(rt)
        return rt / dist.get_world_size()


    def evaluate(net, test_set, criterion, writer, epoch, rank):
        loader = DataLoader(test_set, batch_size=16, sampler=DistributedSampler(test_set, shuffle=False))
        test_loss, test_acc = 0.0, 0.0
        net.eval()
        with torch.no_grad():
            for x, y in loader:
                out = net(x.cuda())
                loss = criterion(out, y.cuda())
                loss = reduce_mean(loss)
                test_loss += loss.item()
                test_acc += (out.argmax(1) == y.cuda()).float().mean().item()
        dist.barrier()
        if rank == 0:
            writer.add_scalar("test/loss", test_loss / len(loader), epoch)
            writer.add_scalar("test/acc", test_acc / len(loader), epoch)
    """


def test_counter_beside_a_reduced_loss_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"evaluate.py": SEG_EVAL})
    assert finding_set(tmp_path, "evaluate.py", select="DDP036") == {("evaluate.py", 28, "DDP036")}


def test_counters_handed_to_one_all_reduce_clean(tmp_path: Path) -> None:
    reduced = SEG_EVAL.replace(
        "        dist.barrier()\n",
        "        stats = torch.tensor([test_loss, test_acc], device=\"cuda\")\n"
        "        dist.all_reduce(stats)\n"
        "        test_loss, test_acc = stats.tolist()\n")
    write_project(tmp_path, {"evaluate.py": reduced})
    assert finding_set(tmp_path, "evaluate.py", select="DDP036") == set()


def test_counter_reduced_by_a_project_helper_without_arguments_clean(tmp_path: Path) -> None:
    # A helper handed nothing may reach anything: unknown, so silent.
    synced = SEG_EVAL.replace("        dist.barrier()\n", "        sync_everything()\n") + (
        "\n\ndef sync_everything():\n    dist.all_reduce(torch.zeros(1))\n")
    write_project(tmp_path, {"evaluate.py": synced})
    assert finding_set(tmp_path, "evaluate.py", select="DDP036") == set()


# A template project: the validation loss is handed to a helper that writes it and picks the best
# checkpoint, returning the best loss so far.
TEMPLATE_UTIL = """\
    import torch


    def epoch_logger_saver(model, writer, epoch, train_loss, val_loss, best_loss, out_dir):
        writer.add_scalar("epoch/train_loss", train_loss, epoch)
        writer.add_scalar("epoch/val_loss", val_loss, epoch)
        if val_loss < best_loss:
            best_loss = val_loss
            torch.save(model.state_dict(), f"{out_dir}/best.pth")
        return best_loss


    def keep_history(history, val_loss):
        history.append(val_loss)
        return min(history)
    """

TEMPLATE_MAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from torch.utils.tensorboard import SummaryWriter

    from util import epoch_logger_saver, keep_history


    def train(rank, model, train_set, val_set, optimizer, criterion, epochs):
        model = DDP(model.cuda())
        train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=32, sampler=DistributedSampler(val_set))
        writer = SummaryWriter("runs") if rank == 0 else None
        best, history = float("inf"), []
        for epoch in range(epochs):
            model.train()
            train_loss = 0.0
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                train_loss += loss.item()
            model.eval()
            val_loss = 0.0
            with torch.no_grad():
                for x, y in val_loader:
                    val_loss += criterion(model(x.cuda()), y.cuda()).item()
            val_loss /= len(val_loader)
            if rank == 0:
                best = epoch_logger_saver(model.module, writer, epoch, train_loss, val_loss, best, "out")
    """


def test_counter_handed_to_a_helper_that_writes_it_and_returns_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"main.py": TEMPLATE_MAIN, "util.py": TEMPLATE_UTIL})
    assert finding_set(tmp_path, "main.py", select="DDP036") == {("main.py", 34, "DDP036")}


def test_counter_handed_to_a_helper_that_keeps_it_clean(tmp_path: Path) -> None:
    kept = TEMPLATE_MAIN.replace(
        "best = epoch_logger_saver(model.module, writer, epoch, train_loss, val_loss, best, \"out\")",
        "best = keep_history(history, val_loss)")
    write_project(tmp_path, {"main.py": kept, "util.py": TEMPLATE_UTIL})
    assert finding_set(tmp_path, "main.py", select="DDP036") == set()


def test_counter_reduced_before_the_helper_clean(tmp_path: Path) -> None:
    reduced = TEMPLATE_MAIN.replace(
        "            val_loss /= len(val_loader)\n",
        "            t = torch.tensor([val_loss, len(val_loader)], device=\"cuda\")\n"
        "            dist.all_reduce(t)\n"
        "            val_loss = (t[0] / t[1]).item()\n")
    write_project(tmp_path, {"main.py": reduced, "util.py": TEMPLATE_UTIL})
    assert finding_set(tmp_path, "main.py", select="DDP036") == set()
