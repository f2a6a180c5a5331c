"""A solver class holds its network wrapped in DDP and has a method that freezes part of it
(`for p in self.model.module.head.parameters(): p.requires_grad = False`); the training script
calls that method and then trains (DDP026, reported at the call). Through `ddpcheck lint` on a
small project, with clean variants: DDP built with `find_unused_parameters=True`, and the
method called only before a final evaluation."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


SOLVER = """\
    import torch
    import torch.nn as nn
    import torch.distributed as dist


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Linear(2, 3)
            self.head = nn.Linear(2, 1)

        def forward(self, x):
            return self.main(x).sum(1) + self.head(x).squeeze(1)


    class Solver:
        def __init__(self, distributed):
            self.model = Net().cuda()
            if distributed:
                self.model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[dist.get_rank()]{extra})

        def freeze_head(self):
            if hasattr(self.model, "module"):
                for param in self.model.module.head.parameters():
                    param.requires_grad = False
            else:
                for param in self.model.head.parameters():
                    param.requires_grad = False
"""

TRAIN = """\
    import torch
    import torch.distributed as dist
    from solver import Solver


    def training_step(solver, optimizer, x):
        optimizer.zero_grad()
        loss = solver.model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.item()


    def main():
        dist.init_process_group("nccl")
        solver = Solver(distributed=True)
        optimizer = torch.optim.Adam(solver.model.parameters(), lr=1e-3)
        for epoch in range(1000):
            if epoch == 0:
                solver.freeze_head()
            training_step(solver, optimizer, torch.randn(64, 2).cuda())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

EVAL_ONLY = """\
    import torch
    import torch.distributed as dist
    from solver import Solver


    def main():
        dist.init_process_group("nccl")
        solver = Solver(distributed=True)
        solver.freeze_head()
        with torch.no_grad():
            print(solver.model(torch.randn(64, 2).cuda()).mean().item())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_method_freezing_part_of_the_ddp_model_before_training_is_reported(tmp_path: Path) -> None:
    files = {"train.py": TRAIN, "solver.py": SOLVER.replace("{extra}", "")}
    assert lines(tmp_path, files, "DDP026") == [("train.py", 20)]


def test_ddp_that_finds_unused_parameters_is_clean(tmp_path: Path) -> None:
    files = {"train.py": TRAIN, "solver.py": SOLVER.replace("{extra}", ", find_unused_parameters=True")}
    assert lines(tmp_path, files, "DDP026") == []


def test_freezing_before_an_evaluation_only_is_clean(tmp_path: Path) -> None:
    files = {"train.py": EVAL_ONLY, "solver.py": SOLVER.replace("{extra}", "")}
    assert lines(tmp_path, files, "DDP026") == []
