"""Pitfalls the lint missed in projects it had not seen, through `ddpcheck lint`. Each test
writes a small project in the style of real ones and reads what the user sees; the clean
variants stay clean."""

from __future__ import annotations


from tests.helpers import write_project as _write, finding_set as _findings


PARALLEL_UTILS = """\
    import os

    import torch
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))


    def wrap_parallel(net, cuda):
        if cuda and LOCAL_RANK == -1 and torch.cuda.device_count() > 1:
            net = DataParallel(net)
        if cuda and LOCAL_RANK != -1:
            {before_wrap}net = DistributedDataParallel(net, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)
        return net
    """

TASKS_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from parallel_utils import LOCAL_RANK, wrap_parallel

    HEADS = {{"left": torch.nn.Linear(8, 2), "right": torch.nn.Linear(8, 3)}}


    def main():
        if LOCAL_RANK != -1:
            torch.cuda.set_device(LOCAL_RANK)
            dist.init_process_group("nccl")
        device = torch.device("cuda", max(LOCAL_RANK, 0))
        for task in HEADS:
            net = HEADS[task]
            {before_call}net = wrap_parallel(net, True){after}
            opt = torch.optim.SGD(net.parameters(), lr=0.01)
        if LOCAL_RANK != -1:
            dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_wrap_a_helper_returns_then_moved_by_the_caller_is_reported(tmp_path):
    _write(tmp_path, {"parallel_utils.py": PARALLEL_UTILS.format(before_wrap=""),
                      "train.py": TASKS_SCRIPT.format(before_call="", after=".to(device)")})
    assert _findings(tmp_path, "train.py", "parallel_utils.py", select="DDP014") == {("train.py", 15, "DDP014")}


def test_a_returned_wrap_of_a_module_moved_first_is_clean(tmp_path):
    for before_wrap, before_call in (("net = net.to(LOCAL_RANK)\n            ", ""),
                                     ("", "net.to(device)\n            ")):
        _write(tmp_path, {"parallel_utils.py": PARALLEL_UTILS.format(before_wrap=before_wrap),
                          "train.py": TASKS_SCRIPT.format(before_call=before_call, after=".to(device)")})
        assert _findings(tmp_path, "train.py", "parallel_utils.py", select="DDP014") == set(), before_wrap + before_call
    _write(tmp_path, {"parallel_utils.py": PARALLEL_UTILS.format(before_wrap=""),
                      "train.py": TASKS_SCRIPT.format(before_call="", after="")})
    assert _findings(tmp_path, "train.py", "parallel_utils.py", select="DDP014") == set()


ZOO = """\
    import torch.nn as nn


    class ConvNet(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 16, 3), {norm}, nn.ReLU())
            self.head = nn.Linear(16, classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))


    ARCHS = {{
        "binary": {{"classes": 2, "net": ConvNet(2)}},
        "grades": {{"classes": 6, "net": ConvNet(6)}},
    }}
    """

ZOO_SCRIPT = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zoo import ARCHS


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--task", default="binary")
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        net = ARCHS[args.task]["net"].cuda()
        model = DDP(net, device_ids=[local_rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_network_looked_up_in_a_table_by_a_run_time_key_is_followed(tmp_path):
    _write(tmp_path, {"zoo.py": ZOO.format(norm="nn.BatchNorm2d(16)"), "train.py": ZOO_SCRIPT})
    assert _findings(tmp_path, "train.py", "zoo.py", select="DDP012") == {("train.py", 19, "DDP012")}


def test_a_table_of_networks_without_batchnorm_is_clean(tmp_path):
    _write(tmp_path, {"zoo.py": ZOO.format(norm="nn.GroupNorm(4, 16)"), "train.py": ZOO_SCRIPT})
    assert _findings(tmp_path, "train.py", "zoo.py", select="DDP012") == set()
