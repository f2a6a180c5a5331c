"""`torch.load` of data shards, one file per pass of a loop, against checkpoint loads, through
`ddpcheck lint` (DDP011): a project is written in tmp_path and the exact findings checked."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

"""

SHARDS_BY_NAME = HEAD + """\
def train(model, shard_paths, epochs):
    for epoch in range(epochs):
        for path in shard_paths:
            graphs = torch.load(path)
            loader = DataLoader(graphs, batch_size=32, sampler=DistributedSampler(graphs))
            for batch in loader:
                model(batch).sum().backward()


def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(4, 4).cuda())
    train(model, sorted(os.listdir("shards")), 10)


if __name__ == "__main__":
    main()
"""

SHARDS_BY_INDEX = HEAD + """\
class Trainer:
    def __init__(self, model, files):
        self.model = model
        self.files = files

    def epoch(self, order):
        for i in order:
            part = torch.load(self.files[i], weights_only=False)
            for x, y in DataLoader(part, batch_size=8):
                self.model(x).sum().backward()


def main():
    dist.init_process_group("nccl")
    trainer = Trainer(DDP(torch.nn.Linear(4, 4).cuda()), ["a.pt", "b.pt"])
    trainer.epoch(torch.randperm(2).tolist())


if __name__ == "__main__":
    main()
"""

ENSEMBLE = HEAD + """\
def main():
    dist.init_process_group("nccl")
    models = []
    for path in ["fold0.pt", "fold1.pt"]:
        net = torch.nn.Linear(4, 4)
        state = torch.load(path)
        net.load_state_dict(state)
        models.append(DDP(net.cuda()))


if __name__ == "__main__":
    main()
"""

RESUME_IN_EPOCH_LOOP = HEAD + """\
def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(4, 4).cuda())
    for epoch in range(3):
        checkpoint = torch.load("last.pt")
        model.module.load_state_dict(checkpoint["model"])


if __name__ == "__main__":
    main()
"""


def _found(tmp_path, source):
    write_project(tmp_path, {"train.py": source})
    return finding_set(tmp_path, "train.py", select="DDP011")


def test_data_shards_loaded_one_per_pass_are_not_checkpoints(tmp_path):
    assert _found(tmp_path, SHARDS_BY_NAME) == set()


def test_shards_indexed_by_the_loop_variable_in_a_method_are_not_checkpoints(tmp_path):
    assert _found(tmp_path, SHARDS_BY_INDEX) == set()


def test_checkpoints_loaded_in_a_loop_into_networks_are_reported(tmp_path):
    assert _found(tmp_path, ENSEMBLE) == {("train.py", 12, "DDP011")}


def test_one_checkpoint_loaded_inside_a_loop_is_reported(tmp_path):
    # The path does not change with the loop: the same checkpoint, restored on every rank.
    assert _found(tmp_path, RESUME_IN_EPOCH_LOOP) == {("train.py", 11, "DDP011")}
