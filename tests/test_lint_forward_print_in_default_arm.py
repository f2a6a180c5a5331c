"""Prints in the `forward` of a network every rank trains under DDP (DDP020), through `ddpcheck
lint`, in the arm a flag parameter's default takes (`if not sample:` of `def forward(self, x,
y=None, mask=None, sample=False)`): the training step's call passes no `sample=`, so the print
runs at every step on every rank. A flag some call passes by name, or whose default takes the
other arm, leaves the print alone."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

NET = """\
    import torch


    class Scorer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(16, 4)

        def forward(self, x, y=None, mask=None, sample={default}):
            logits = self.body(x)
            if not sample:
                loss = torch.nn.functional.cross_entropy(logits, y)
                print("loss", loss.item())
                return loss
            return logits.argmax(-1)
"""

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from scorer import Scorer


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(Scorer().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            for x, y in loader:
                loss = model(x.cuda(), y=y.cuda(){extra})
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
"""


def test_a_print_in_the_arm_the_default_takes_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"scorer.py": NET.format(default="False"), "train.py": TRAIN.format(extra="")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("scorer.py", 13, "DDP020")}


def test_a_flag_passed_by_name_or_defaulting_to_the_other_arm_is_left_alone(tmp_path) -> None:
    write_project(tmp_path, {"scorer.py": NET.format(default="False"), "train.py": TRAIN.format(extra=", sample=False")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()
    write_project(tmp_path, {"scorer.py": NET.format(default="True"), "train.py": TRAIN.format(extra="")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()
