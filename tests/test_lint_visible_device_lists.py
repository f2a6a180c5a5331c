"""`CUDA_VISIBLE_DEVICES` set to the list of GPUs every process shares (from the configuration)
pins no process: each still starts on the first visible GPU (DDP003). A value chosen per process
pins it. Through `ddpcheck lint` on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size, config):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    os.environ["CUDA_VISIBLE_DEVICES"] = {visible}
    model = DDP(torch.nn.Linear(4, 4).to(rank), device_ids=[rank])
    dist.destroy_process_group()


if __name__ == "__main__":
    config = {{"meta": {{"device_ids": "0,1"}}, "gpus": "0,1", "gpu_list": ["0", "1"]}}
    mp.spawn(worker, args=(2, config), nprocs=2)
"""


@pytest.mark.parametrize("visible", ['config["meta"]["device_ids"]', 'config["gpus"]'])
def test_a_shared_list_of_gpus_pins_no_process(tmp_path, visible):
    write_project(tmp_path, {"train.py": SCRIPT.format(visible=visible)})
    assert finding_set(tmp_path, "train.py", select="DDP003") == {("train.py", 9, "DDP003")}


@pytest.mark.parametrize("visible", ["str(rank)", 'config["gpu_list"][rank]'])
def test_a_gpu_chosen_per_process_pins_it(tmp_path, visible):
    write_project(tmp_path, {"train.py": SCRIPT.format(visible=visible)})
    assert finding_set(tmp_path, "train.py", select="DDP003") == set()
