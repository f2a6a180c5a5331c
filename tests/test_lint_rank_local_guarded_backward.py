"""A training loop whose backward runs only when a test of the rank's own loss passes, through
`ddpcheck lint` (DDP035): `valid, error = check_loss(loss, loss.item())`, then `if valid:
backward; step` — the rank whose loss is NaN makes no backward while the others all-reduce."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

UTILS = """\
    import math

    import torch


    def check_loss(loss, loss_value):
        if math.isinf(loss_value):
            return False, "inf loss"
        if torch.isnan(loss).any():
            return False, "nan loss"
        return True, ""
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils import check_loss


    def train(model, loader, criterion, optimizer, epochs):
        for epoch in range(epochs):
            for inputs, targets in loader:
                loss = criterion(model(inputs.cuda()), targets.cuda())
                loss_value = loss.item()
                valid_loss, error = check_loss(loss, loss_value)
                if valid_loss:
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 400)
                    optimizer.step()
                else:
                    print(error)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(build().cuda(), device_ids=[local_rank])
        train(model, make_loader(), torch.nn.CTCLoss(), torch.optim.AdamW(model.parameters()), 10)
    """


def test_backward_under_a_project_check_of_the_ranks_loss_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TRAIN, "utils.py": UTILS})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 16, "DDP035")}


def test_backward_under_a_direct_isfinite_test_reported(tmp_path: Path) -> None:
    direct = TRAIN.replace("                if valid_loss:\n", "                if torch.isfinite(loss):\n")
    write_project(tmp_path, {"train.py": direct, "utils.py": UTILS})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 16, "DDP035")}


def test_flag_all_reduced_before_the_test_clean(tmp_path: Path) -> None:
    agreed = TRAIN.replace(
        "                if valid_loss:\n",
        "                flag = torch.tensor(float(valid_loss), device=loss.device)\n"
        "                dist.all_reduce(flag, op=dist.ReduceOp.MIN)\n"
        "                if flag.item() > 0:\n")
    write_project(tmp_path, {"train.py": agreed, "utils.py": UTILS})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_else_branch_back_propagates_too_clean(tmp_path: Path) -> None:
    both = TRAIN.replace("                    print(error)\n",
                         "                    optimizer.zero_grad()\n"
                         "                    (loss * 0).backward()\n")
    write_project(tmp_path, {"train.py": both, "utils.py": UTILS})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_backward_under_an_option_clean(tmp_path: Path) -> None:
    optional = TRAIN.replace("                if valid_loss:\n", "                if epoch >= 0:\n")
    write_project(tmp_path, {"train.py": optional, "utils.py": UTILS})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_check_that_agrees_across_ranks_clean(tmp_path: Path) -> None:
    agreeing = UTILS.replace(
        "    def check_loss(loss, loss_value):\n",
        "    def check_loss(loss, loss_value):\n"
        "        torch.distributed.all_reduce(loss)\n")
    write_project(tmp_path, {"train.py": TRAIN, "utils.py": agreeing})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()
