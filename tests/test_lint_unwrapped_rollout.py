"""A step that unwraps its DDP model with a helper and runs a method of the inner network in a
loop of forwards, back-propagated after the loop, through `ddpcheck lint` (DDP013)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

NETWORK = """\
    import torch
    import torch.nn as nn


    class Encoder(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Conv2d(3, dim, 3, padding=1)

        def forward(self, x):
            return self.proj(x)


    ENCODERS = {"conv": Encoder}


    class Forecaster(nn.Module):
        def __init__(self, kind="conv", dim=32):
            super().__init__()
            encoder_cls = ENCODERS[kind]
            self.encoder = encoder_cls(dim)
            self.head = nn.Conv2d(dim, 3, 1)

        def forward(self, x):
            return self.head(self.encoder(x))

        def rollout(self, x, steps):
            outs = []
            for _ in range(steps):
                x = self.head(self.encoder(x))
                outs.append(x)
            return torch.stack(outs, 1)

        def reset_stats(self):
            self.calls = 0
    """

ALIGN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from network import Forecaster


    def unwrap(model):
        return model.module if hasattr(model, "module") else model


    def align_step(model, batch, optimizer, members=4):
        x, target = batch
        net = unwrap(model)
        preds = []
        for _ in range(members):
            preds.append(net.rollout(x, steps=target.shape[1]))
        loss = (torch.stack(preds).mean(0) - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()


    def main(loader):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(Forecaster().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for batch in loader:
            align_step(model, batch, optimizer)
        dist.destroy_process_group()
    """


def test_inner_method_in_a_loop_of_forwards_backpropagated_after_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"align.py": ALIGN, "network.py": NETWORK})
    assert finding_set(tmp_path, "align.py", select="DDP013") == {("align.py", 19, "DDP013")}


def test_same_loop_without_backward_clean(tmp_path: Path) -> None:
    scored = ALIGN.replace("        loss.backward()\n", "")
    write_project(tmp_path, {"align.py": scored, "network.py": NETWORK})
    assert finding_set(tmp_path, "align.py", select="DDP013") == set()


def test_same_loop_under_no_grad_clean(tmp_path: Path) -> None:
    scored = ALIGN.replace("        for _ in range(members):\n            preds.append(",
                           "        with torch.no_grad():\n            for _ in range(members):\n"
                           "                preds.append(")
    scored = scored.replace("        loss = (torch.stack(preds)", "        loss = model(x).mean() + (torch.stack(preds)")
    write_project(tmp_path, {"align.py": scored, "network.py": NETWORK})
    assert finding_set(tmp_path, "align.py", select="DDP013") == set()


def test_upkeep_method_in_the_loop_clean(tmp_path: Path) -> None:
    upkeep = ALIGN.replace("            preds.append(net.rollout(x, steps=target.shape[1]))",
                           "            net.reset_stats()\n            preds.append(model(x))")
    write_project(tmp_path, {"align.py": upkeep, "network.py": NETWORK})
    assert finding_set(tmp_path, "align.py", select="DDP013") == set()
