"""DDP020 through `ddpcheck lint`: `wandb.log` in the training loop where every rank starts its
own wandb run (`wandb.init(...)` unguarded): each process records the same figures again. Clean
where only rank 0 starts a run, or the other ranks' runs are turned off."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SCRIPT = """\
import os

import torch
import torch.distributed as dist
import wandb
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Pairs(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.zeros(8), torch.zeros(8)


def main():
    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
{init}
    data = Pairs()
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    for epoch in range(5):
        for x, y in loader:
            loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
{log}
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

LOG = '            wandb.log({"loss": loss.item(), "step": step})'


def _lint(tmp_path, init: str, log: str = LOG) -> set:
    _write(tmp_path, {"train.py": SCRIPT.format(init=init, log=log)})
    return _findings(tmp_path, "train.py", select="DDP020")


def test_wandb_log_where_every_rank_starts_a_run_is_reported(tmp_path):
    assert _lint(tmp_path, '    wandb.init(project="pairs")') == {("train.py", 36, "DDP020")}


def test_wandb_log_where_only_rank_zero_starts_a_run_is_clean(tmp_path):
    assert _lint(tmp_path, '    if rank == 0:\n        wandb.init(project="pairs")') == set()


def test_wandb_runs_turned_off_on_the_other_ranks_are_clean(tmp_path):
    init = '    wandb.init(project="pairs", mode="online" if rank == 0 else "disabled")'
    assert _lint(tmp_path, init) == set()


def test_wandb_log_under_a_rank_guard_is_clean(tmp_path):
    log = "            if rank == 0:\n    " + LOG
    assert _lint(tmp_path, '    wandb.init(project="pairs")', log) == set()
