"""What the wrapped model's classes run, on mechanisms seen on public scripts of batch 22: a
reentrant checkpoint in a module-level helper the model's forward calls (DDP023); each through
`ddpcheck lint` on a small project written in the style of the scripts, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, *targets: str) -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `targets` are linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, *(targets or ("train.py",)), select=select))


# The checkpoint sits in a helper function of the model's module; forward calls the helper.
NET = """\
    import torch
    from torch import nn
    import torch.utils.checkpoint as cp


    def run_block(enabled, block, *inputs):
        if enabled:
            return cp.checkpoint(block, *inputs, use_reentrant={reentrant})
        return block(*inputs)


    class Stage(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x, h, w):
            return self.proj(x)


    class WeatherNet(nn.Module):
        def __init__(self, dim=32):
            super().__init__()
            self.embed = nn.Linear(dim, dim)
            self.stages = nn.Sequential(Stage(dim), Stage(dim))
            self.use_ckpt = self.training

        def forward(self, x):
            x = self.embed(x)
            x = run_block(self.use_ckpt, self.stages[0], x, 8, 16)
            x = run_block(self.use_ckpt, self.stages[1], x, 8, 16)
            return x
"""

TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from model.net import WeatherNet


    def train(model, device, epochs):
        model = DDP(model, device_ids=[device], find_unused_parameters={unused})
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        for epoch in range(epochs):
            out = model(torch.randn(4, 32, device=device))
            out.sum().backward()
            opt.step()
            opt.zero_grad()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = WeatherNet().to(local_rank)
        train(model, local_rank, 10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _helper_project(reentrant: str = "True", unused: str = "True") -> dict[str, str]:
    return {"train.py": TRAIN.format(unused=unused), "model/__init__.py": "",
            "model/net.py": NET.format(reentrant=reentrant)}


def test_reentrant_checkpoint_in_a_helper_the_forward_calls(tmp_path: Path) -> None:
    assert lines(tmp_path, _helper_project(), "DDP023", "train.py", "model/net.py") == [("net.py", 8)]


def test_non_reentrant_checkpoint_in_a_helper_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _helper_project(reentrant="False"), "DDP023", "train.py", "model/net.py") == []


def test_helper_checkpoint_without_find_unused_parameters_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _helper_project(unused="False"), "DDP023", "train.py", "model/net.py") == []


def test_helper_the_model_never_calls_is_clean(tmp_path: Path) -> None:
    files = _helper_project()
    files["model/net.py"] = files["model/net.py"].replace(
        "x = run_block(self.use_ckpt, self.stages[0], x, 8, 16)", "x = self.stages[0](x, 8, 16)").replace(
        "x = run_block(self.use_ckpt, self.stages[1], x, 8, 16)", "x = self.stages[1](x, 8, 16)")
    assert lines(tmp_path, files, "DDP023", "train.py", "model/net.py") == []
