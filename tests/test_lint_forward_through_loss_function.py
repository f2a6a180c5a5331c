"""A retry loop around the forward of a batch (`while bad_grad:` until this rank's loss is
finite) whose DDP forward runs inside a project loss function handed the DDP model (DDP035):
through `ddpcheck lint` on a small project in the style of a score-model trainer, with clean
variants where the loss function gets the plain model or the flag is agreed across ranks."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


LOSSES = """\
    import torch


    def dsm_loss(scorenet, x, sigmas):
        labels = torch.randint(0, len(sigmas), (x.shape[0],), device=x.device)
        noise = torch.randn_like(x) * sigmas[labels].view(-1, 1, 1, 1)
        scores = scorenet(x + noise, labels)
        return ((scores * sigmas[labels].view(-1, 1, 1, 1) + noise / sigmas[labels].view(-1, 1, 1, 1)) ** 2).mean()
"""

TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from losses import dsm_loss
    from models import ScoreNet


    def train(rank, loader, sigmas, epochs):
        score = ScoreNet().to(rank)
        score = DDP(score, device_ids=[rank])
        optimizer = torch.optim.Adam(score.parameters(), lr=1e-4)
        for epoch in range(epochs):
            for x, _ in loader:
                x = x.to(rank)
                bad_grad = True
                while bad_grad:
                    optimizer.zero_grad(set_to_none=True)
                    loss = dsm_loss({model}, x, sigmas)
                    {agree}
                    if torch.isfinite(loss):
                        bad_grad = False
                loss.backward()
                optimizer.step()
"""

MODELS = """\
    import torch.nn as nn


    class ScoreNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x, labels):
            return self.conv(x)
"""


def _project(model: str = "score", agree: str = "pass") -> dict[str, str]:
    return {"train.py": TRAIN.replace("{model}", model).replace("{agree}", agree),
            "losses.py": LOSSES, "models.py": MODELS}


def test_retry_around_a_ddp_forward_in_a_loss_function_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _project(), "DDP035") == [("train.py", 21)]


def test_retry_around_the_plain_model_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _project(model="score.module"), "DDP035") == []


def test_retry_with_the_loss_agreed_across_ranks_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _project(agree="dist.all_reduce(loss)"), "DDP035") == []
