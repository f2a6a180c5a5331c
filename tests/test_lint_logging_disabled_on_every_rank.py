"""DDP020 through `ddpcheck lint`: `logging.disable(level)` run on every rank drops every record
up to that level, so the logger calls at those levels in the loop print nothing; the prints
beside them still repeat."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SCRIPT = """\
import logging
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

{disable}
logging.basicConfig(level=logging.INFO)
log = logging.getLogger("train")


class Pairs(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.zeros(8), torch.zeros(8)


def main():
    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    data = Pairs()
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(5):
        for x, y in loader:
            loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        log.info("epoch %d loss %.4f", epoch, loss.item())
        print(f"epoch {{epoch}} loss {{loss.item():.4f}}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _lint(tmp_path, disable: str) -> set:
    _write(tmp_path, {"train.py": SCRIPT.format(disable=disable)})
    return _findings(tmp_path, "train.py", select="DDP020")


def test_records_up_to_the_disabled_level_are_dropped_and_the_print_stays(tmp_path):
    assert _lint(tmp_path, "logging.disable(logging.WARNING)") == {("train.py", 38, "DDP020")}


def test_a_lower_disabled_level_leaves_the_info_records(tmp_path):
    assert _lint(tmp_path, "logging.disable(logging.DEBUG)") == {("train.py", 37, "DDP020"),
                                                                ("train.py", 38, "DDP020")}


def test_logging_turned_back_on_leaves_the_info_records(tmp_path):
    disable = "logging.disable(logging.WARNING)\nlogging.disable(logging.NOTSET)"
    assert _lint(tmp_path, disable) == {("train.py", 38, "DDP020"), ("train.py", 39, "DDP020")}
