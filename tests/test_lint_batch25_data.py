"""Data and launch mechanisms seen on public scripts of batch 25: a `set_epoch` given the epoch
loop's own bound (DDP002), a rendezvous written beside a WORLD_SIZE taken from the GPU count
under a launcher (DDP015), and a LOCAL_RANK compared with a number that gives the script no
local rank (DDP008). Each through `ddpcheck lint` on a small project, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# The epoch loop's sampler gets an epoch: the loop counter, or the number of epochs that bounds it.
EPOCH_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model):
            self.model = model

        def train(self, args, dataset):
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
            optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            for epoch in range(int(args.epochs * 0.5)):
                sampler.set_epoch({epoch})
                for x, y in loader:
                    loss = self.model(x.cuda()).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--batch_size", type=int, default=32)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        Trainer(torch.nn.Linear(4, 1).cuda()).train(args, torch.load("train.pt"))
"""


def test_set_epoch_given_the_epoch_loops_bound(tmp_path: Path) -> None:
    files = {"train.py": EPOCH_SCRIPT.format(epoch="args.epochs")}
    assert lines(tmp_path, files, "DDP002") == [("train.py", 17)]


def test_set_epoch_given_the_loop_counter_is_clean(tmp_path: Path) -> None:
    files = {"train.py": EPOCH_SCRIPT.format(epoch="epoch")}
    assert lines(tmp_path, files, "DDP002") == []


def test_set_epoch_given_a_bound_the_loop_advances_is_clean(tmp_path: Path) -> None:
    script = EPOCH_SCRIPT.format(epoch="args.epochs").replace(
        "                for x, y in loader:", "                args.epochs += 1\n                for x, y in loader:")
    assert lines(tmp_path, {"train.py": script}, "DDP002") == []


# A setup helper in another module writes the rendezvous and WORLD_SIZE (the GPU count) and
# leaves RANK to whatever started the process.
DDP_UTIL = """\
    import os
    import torch
    import torch.distributed as dist


    def init_ddp():
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12359"
        os.environ["WORLD_SIZE"] = str(torch.cuda.device_count())
        {rank}
        dist.init_process_group(backend="nccl")
        return dist.get_rank()
"""

RDZV_SCRIPT = """\
    import torch
    from ddp_util import init_ddp

    if __name__ == "__main__":
        rank = init_ddp()
        torch.cuda.set_device(rank)
        model = torch.nn.Linear(4, 1).cuda()
        print(model(torch.ones(2, 4).cuda()))
"""


def test_rendezvous_written_beside_world_size_with_rank_from_the_launcher(tmp_path: Path) -> None:
    files = {"train.py": RDZV_SCRIPT, "ddp_util.py": DDP_UTIL.format(rank="pass")}
    assert lines(tmp_path, files, "DDP015") == [("ddp_util.py", 7)]


def test_rendezvous_written_with_rank_and_world_size_is_clean(tmp_path: Path) -> None:
    files = {"train.py": RDZV_SCRIPT, "ddp_util.py": DDP_UTIL.format(rank='os.environ["RANK"] = "0"')}
    assert lines(tmp_path, files, "DDP015") == []


# The local rank taken from the old launcher's flag; a helper reads LOCAL_RANK only to print
# on one process (or to take the rank from it).
LAUNCH_UTIL = """\
    import os


    def print0(*args, **kwargs):
        if "LOCAL_RANK" not in os.environ or {test}:
            print(*args, **kwargs)
"""

LAUNCH_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from utils import print0


    def train(opt):
        model = torch.nn.Linear(4, 1).cuda()
        print0(model(torch.ones(2, 4).cuda()))


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", default=-1, type=int)
        opt = parser.parse_args()
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(opt.local_rank)
        train(opt)
"""


def test_local_rank_flag_beside_a_helper_that_compares_local_rank(tmp_path: Path) -> None:
    files = {"train.py": LAUNCH_SCRIPT, "utils.py": LAUNCH_UTIL.format(test='int(os.environ["LOCAL_RANK"]) == 0')}
    assert lines(tmp_path, files, "DDP008") == [("train.py", 14)]


def test_local_rank_flag_beside_a_helper_that_reads_local_rank_is_clean(tmp_path: Path) -> None:
    files = {"train.py": LAUNCH_SCRIPT,
             "utils.py": LAUNCH_UTIL.format(test='torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) is None')}
    files["utils.py"] = files["utils.py"].replace("import os", "import os\n    import torch")
    assert lines(tmp_path, files, "DDP008") == []
