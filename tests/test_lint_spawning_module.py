"""A module that starts the workers itself (`mp.spawn(worker, ...)` in a function that a
package command calls) is where the job starts: its process group must be torn down (DDP005),
even without a `__main__` guard. Through `ddpcheck lint` on a small package."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

UTIL = """\
    import os

    import torch
    import torch.distributed as dist


    def init_dist(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    """

TRAIN = """\
    import torch
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pkg.util import init_dist


    def worker(rank, world_size, epochs):
        device = init_dist(rank, world_size)
        model = DDP(torch.nn.Linear(4, 1).to(device), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
        for _ in range(epochs):
            optimizer.zero_grad()
            model(torch.randn(8, 4, device=device)).sum().backward()
            optimizer.step(){teardown}


    def train(world_size=2, epochs=3):
        mp.spawn(worker, args=(world_size, epochs), nprocs=world_size, join=True)
    """


def _project(tmp_path, teardown=""):
    _write(tmp_path, {"pkg/__init__.py": "from pkg.train import train\n", "pkg/util.py": UTIL,
                      "pkg/train.py": TRAIN.replace("{teardown}", teardown)})
    return _findings(tmp_path, "pkg/train.py", select="DDP005")


def test_a_module_that_spawns_the_workers_must_tear_their_group_down(tmp_path):
    assert _project(tmp_path) == {("util.py", 10, "DDP005")}


def test_workers_that_destroy_the_group_are_clean(tmp_path):
    teardown = "\n        torch.distributed.destroy_process_group()"
    assert _project(tmp_path, teardown) == set()


def test_a_helper_module_that_only_makes_the_group_is_not_a_script(tmp_path):
    _project(tmp_path)
    assert _findings(tmp_path, "pkg/util.py", select="DDP005") == set()
