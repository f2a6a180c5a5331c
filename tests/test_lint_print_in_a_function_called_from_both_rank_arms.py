"""DDP020 through `ddpcheck lint`: an epoch function that the epoch loop calls in both arms of
one rank test (`if rank == 0: train_epoch(..., loaders)` / `else: train_epoch(..., [loader,
None])`) runs on every rank, and so does its per-epoch print."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SCRIPT = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Clips(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.zeros(8), torch.zeros(8)


def run(rank, world):
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    data = Clips()
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[rank])
    opt = torch.optim.Adam(model.parameters())
    for epoch in range(10):
        if rank == 0:
            train_epoch(rank, epoch, model, opt, [loader, loader])
        else:
            {other}(rank, epoch, model, opt, [loader, None])
    dist.destroy_process_group()


def train_epoch(rank, epoch, model, opt, loaders):
    train_loader, eval_loader = loaders
    longest = 0
    for x, y in train_loader:
        loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        longest = max(longest, x.size(0))
{report}


def quiet_epoch(rank, epoch, model, opt, loaders):
    for x, y in loaders[0]:
        loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    mp.spawn(run, nprocs=2, args=(2,))
"""


def _lint(tmp_path, other: str = "train_epoch", report: str = "    print(epoch, longest)") -> set:
    _write(tmp_path, {"train.py": SCRIPT.format(other=other, report=report)})
    return _findings(tmp_path, "train.py", select="DDP020")


def test_a_print_of_a_function_called_in_both_arms_of_a_rank_test_is_reported(tmp_path):
    assert _lint(tmp_path) == {("train.py", 41, "DDP020")}


def test_a_function_only_the_rank_zero_arm_calls_is_clean(tmp_path):
    # The other ranks run another epoch function that prints nothing.
    assert _lint(tmp_path, other="quiet_epoch") == set()


def test_a_print_under_its_own_rank_guard_is_clean(tmp_path):
    assert _lint(tmp_path, report="    if rank == 0:\n        print(epoch, longest)") == set()
