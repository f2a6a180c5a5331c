"""A logger that is one rank's own (`logging.getLogger(f"GPU{local_rank}")`, made in a project
factory that sets each rank's level, then handed to a trainer as `self.log`) may be quiet or
tagged off rank 0: its records in the loop are not reported (DDP020). The same trainer handed
one logger for every rank is."""

from __future__ import annotations

from tests.helpers import finding_lines as lines

MISC = """\
import logging


def create_logger(local_rank, debug=False):
    level = "DEBUG" if debug else ("INFO" if local_rank == 0 else "WARN")
    logger = logging.getLogger({name})
    logger.setLevel(getattr(logging, level))
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    logger.addHandler(handler)
    return logger
"""

TRAIN = """\
import argparse
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import misc


class Trainer:
    def __init__(self, args, logger):
        self.log = logger
        self.model = DDP(torch.nn.Linear(4, 1).cuda(args.local_rank), device_ids=[args.local_rank])
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1 * dist.get_world_size())

    def train(self, loader):
        for epoch in range(10):
            for x in loader:
                loss = self.model(x).sum()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.log.info(f"loss {{loss.item()}}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    logger = misc.create_logger(args.local_rank)
    Trainer(args, logger).train(torch.randn(64, 4).split(8))
    dist.destroy_process_group()
"""


def test_records_of_a_logger_named_for_the_rank_are_not_reported(tmp_path):
    files = {"misc.py": MISC.format(name='f"GPU{local_rank}"'), "train.py": TRAIN.format()}
    assert lines(tmp_path, files, "DDP020") == []


def test_records_of_one_logger_for_every_rank_are_reported(tmp_path):
    files = {"misc.py": MISC.format(name='"train"').replace(
        '("INFO" if local_rank == 0 else "WARN")', '"INFO"'), "train.py": TRAIN.format()}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 21)]
