"""A table of precomputed embeddings read with `torch.load` (`label_embeddings.pt`, made once by a
preprocessing script) is cached data, saved from the CPU like cached features: no DDP011. A
checkpoint beside it is still reported. Through `ddpcheck lint` on a small project in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    net = build_net().cuda()
    table = torch.load({path!r})
    net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local_rank])
    train(net, table)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("path", "reported"), [
    ("data/label_embeddings.pt", False),
    ("assets/prompt_embeddings_v2.pth", False),
    ("checkpoints/last.pt", True),
])
def test_a_table_of_precomputed_embeddings_is_cached_data(tmp_path, path, reported):
    write_project(tmp_path, {"train.py": SCRIPT.format(path=path)})
    assert finding_set(tmp_path, "train.py", select="DDP011") == ({("train.py", 11, "DDP011")} if reported else set())
