"""An evaluation function that gathers its predictions across ranks inside the loop but sums its
loss per rank, through `ddpcheck lint` (DDP036): a collective in the loop reduces what it is
handed, so the loss it returns is still one shard's; the caller that logs the returned figures
(also through `for name, value in metrics.items():`) is reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from sklearn.metrics import accuracy_score
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torch.utils.tensorboard import SummaryWriter


    def gather_tensor(t, world_size):
        parts = [torch.zeros_like(t) for _ in range(world_size)]
        dist.all_gather(parts, t)
        return torch.cat(parts)


    def evaluate(model, loader, criterion, world_size, device):
        model.eval()
        total_loss = 0.0
        preds_all, labels_all = [], []
        with torch.no_grad():
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                out = model(x)
                total_loss += criterion(out, y).item()
                preds = gather_tensor(out.argmax(1), world_size)
                labels = gather_tensor(y, world_size)
                preds_all.extend(preds.cpu().tolist())
                labels_all.extend(labels.cpu().tolist())
        return {"loss": total_loss / len(loader), "accuracy": accuracy_score(labels_all, preds_all)}


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        world_size = dist.get_world_size()
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        model = torch.nn.parallel.DistributedDataParallel(build_model().to(device))
        val_set = build_dataset("val")
        val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))
        criterion = torch.nn.CrossEntropyLoss()
        writer = SummaryWriter("runs")
        for epoch in range(10):
            train_one_epoch(model, epoch)
            val_metrics = evaluate(model, val_loader, criterion, world_size, device)
            if rank == 0:
                for name, value in val_metrics.items():
                    writer.add_scalar(f"{name}/val", value, epoch)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_loss_summed_beside_gathered_predictions_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP036") == {("train.py", 48, "DDP036")}


def test_loss_gathered_too_clean(tmp_path: Path) -> None:
    # The loss is gathered in the loop as well: what is summed holds every rank's share.
    reduced = TRAIN.replace(
        "                total_loss += criterion(out, y).item()\n",
        "                losses = gather_tensor(criterion(out, y).detach().reshape(1), world_size)\n"
        "                total_loss += losses.mean().item()\n")
    write_project(tmp_path, {"train.py": reduced})
    assert finding_set(tmp_path, "train.py", select="DDP036") == set()


def test_loop_with_a_helper_handed_nothing_clean(tmp_path: Path) -> None:
    # A project helper called with no argument may reduce anything: unknown, so silent.
    synced = TRAIN.replace(
        "                labels = gather_tensor(y, world_size)\n",
        "                labels = gather_tensor(y, world_size)\n"
        "                sync_stats()\n") + (
        "\n\ndef sync_stats():\n    dist.all_reduce(torch.zeros(1))\n")
    write_project(tmp_path, {"train.py": synced})
    assert finding_set(tmp_path, "train.py", select="DDP036") == set()


def test_reported_at_a_print_of_the_returned_dict(tmp_path: Path) -> None:
    printed = TRAIN.replace(
        "                for name, value in val_metrics.items():\n"
        "                    writer.add_scalar(f\"{name}/val\", value, epoch)\n",
        "                print(f\"val loss {val_metrics['loss']:.4f}\")\n")
    write_project(tmp_path, {"train.py": printed})
    assert finding_set(tmp_path, "train.py", select="DDP036") == {("train.py", 47, "DDP036")}


# A compression pipeline: the validation pass sums each loss term into a dict entry.
PIPELINE = """\
    import logging

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torch.utils.tensorboard import SummaryWriter

    log = logging.getLogger(__name__)


    def validate_one_epoch(net, loader):
        net.eval()
        totals = {{}}
        count = 0
        for batch_id, points in enumerate(loader):
            with torch.no_grad():
                terms = net(points.cuda())["loss"]
            for k, v in terms.items():
                totals[k] = totals.get(k, 0.0)
                totals[k] += v.mean().item()
            count += 1
        {reduce}return {{k: v / max(count, 1) for k, v in totals.items()}}


    def train(net, train_set, val_set, epochs):
        dist.init_process_group("nccl")
        writer = SummaryWriter("runs") if dist.get_rank() == 0 else None
        val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))
        model = torch.nn.parallel.DistributedDataParallel(net.cuda())
        for epoch in range(epochs):
            fit_one_epoch(model, train_set, epoch)
            val_loss = validate_one_epoch(model, val_loader)
            for k, v in val_loss.items():
                if writer is not None:
                    writer.add_scalar("val/" + k, v, epoch)
        dist.destroy_process_group()
    """


def test_loss_terms_summed_into_a_dict_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"pipeline.py": PIPELINE.format(reduce="")})
    assert finding_set(tmp_path, "pipeline.py", select="DDP036") == {("pipeline.py", 36, "DDP036")}


def test_dict_of_sums_all_reduced_clean(tmp_path: Path) -> None:
    reduced = PIPELINE.format(reduce=(
        "keys = sorted(totals)\n"
        "        sums = torch.tensor([totals[k] for k in keys] + [count], device=\"cuda\")\n"
        "        dist.all_reduce(sums)\n"
        "        totals, count = dict(zip(keys, sums[:-1].tolist())), sums[-1].item()\n"
        "        "))
    write_project(tmp_path, {"pipeline.py": reduced})
    assert finding_set(tmp_path, "pipeline.py", select="DDP036") == set()


def test_loss_reduced_in_place_in_the_loop_clean(tmp_path: Path) -> None:
    # `dist.all_reduce(loss)` sums the batch loss over the ranks in place before it is added.
    reduced = TRAIN.replace(
        "                total_loss += criterion(out, y).item()\n",
        "                loss = criterion(out, y).detach()\n"
        "                dist.all_reduce(loss)\n"
        "                total_loss += loss.item() / world_size\n")
    write_project(tmp_path, {"train.py": reduced})
    assert finding_set(tmp_path, "train.py", select="DDP036") == set()


def test_dict_entries_reduced_on_the_distributed_path_clean(tmp_path: Path) -> None:
    branched = PIPELINE.format(reduce="").replace(
        "                totals[k] += v.mean().item()\n",
        "                if dist.is_initialized():\n"
        "                    totals[k] += reduce_mean(v.mean()).item()\n"
        "                else:\n"
        "                    totals[k] += v.mean().item()\n") + (
        "\n\ndef reduce_mean(t):\n"
        "    t = t.clone()\n"
        "    dist.all_reduce(t)\n"
        "    return t / dist.get_world_size()\n")
    write_project(tmp_path, {"pipeline.py": branched})
    assert finding_set(tmp_path, "pipeline.py", select="DDP036") == set()
