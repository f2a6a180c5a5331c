"""A function of the script that runs the DDP model its module binds at top level (a global,
not a parameter) and is called only on the main process, through `ddpcheck lint` (DDP009): the
forward inside it broadcasts the network's buffers, which the other ranks never join."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

NET = """\
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.proj = nn.Linear(n, n)
            BUFFER

        def forward(self, x):
            return self.proj(x).tril()


    class Net(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.blocks = nn.ModuleList([Block(n) for _ in range(2)])

        def forward(self, x, y):
            for block in self.blocks:
                x = block(x)
            return x, (x - y).pow(2).mean()
    """

TRAIN = """\
    import os

    import torch
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net import Net

    distributed = int(os.environ.get("RANK", -1)) != -1
    if distributed:
        init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        is_master = int(os.environ["RANK"]) == 0
    else:
        is_master = True

    model = Net(16).cuda()
    if distributed:
        model = DDP(model, device_ids=[local_rank])


    @torch.no_grad()
    def evaluate():
        model.eval()
        total = 0.0
        for _ in range(20):
            _, loss = EVAL_MODEL(torch.randn(8, 16).cuda(), torch.randn(8, 16).cuda())
            total += loss.item()
        model.train()
        return total / 20


    optimizer = torch.optim.AdamW(model.parameters(), lr=float(os.environ.get("LR", "3e-4")))
    for step in range(10000):
        if step % 500 == 0 and is_master:
            print(step, evaluate())
        _, loss = model(torch.randn(8, 16).cuda(), torch.randn(8, 16).cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if distributed:
        destroy_process_group()
    """

BUFFER = 'self.register_buffer("mask", torch.ones(n, n).tril())'


def _lint(tmp_path: Path, buffer: str = BUFFER, model: str = "model") -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"net.py": NET.replace("BUFFER", buffer),
                             "train.py": TRAIN.replace("EVAL_MODEL", model)})
    return finding_set(tmp_path, "train.py", select="DDP009")


def test_a_rank_zero_helper_running_the_global_ddp_model_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path) == {("train.py", 37, "DDP009")}


def test_the_helper_running_the_inner_module_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, model="(model.module if distributed else model)") == set()


def test_a_network_without_buffers_is_clean(tmp_path: Path) -> None:
    # Under no_grad, DDP's forward of a network with nothing to broadcast makes no collective.
    assert _lint(tmp_path, buffer="self.scale = 1.0") == set()


def test_a_helper_that_binds_its_own_model_is_clean(tmp_path: Path) -> None:
    text = TRAIN.replace("EVAL_MODEL", "model").replace(
        "    model.eval()\n", "    model = Net(16).cuda()\n    model.eval()\n", 1)
    write_project(tmp_path, {"net.py": NET.replace("BUFFER", BUFFER), "train.py": text})
    assert finding_set(tmp_path, "train.py", select="DDP009") == set()


FUSED = """\
    import torch
    import torch.nn as nn


    class Attention(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.qkv = nn.Linear(n, 3 * n)
            self.fused = hasattr(torch.nn.functional, "scaled_dot_product_attention")
            if not self.fused:
                # only PyTorch before 2.0 needs the mask
                self.register_buffer("mask", torch.ones(n, n).tril())

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            if self.fused:
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return (q @ k.transpose(-2, -1)).masked_fill(self.mask == 0, float("-inf")).softmax(-1) @ v


    class Net(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.blocks = nn.ModuleList([Attention(n) for _ in range(2)])

        def forward(self, x, y):
            for block in self.blocks:
                x = block(x)
            return x, (x - y).pow(2).mean()
    """


def test_a_mask_buffer_only_for_pytorch_without_fused_attention_is_clean(tmp_path: Path) -> None:
    # Every PyTorch since 2.0 has the fused attention: the buffer is never registered.
    write_project(tmp_path, {"net.py": FUSED, "train.py": TRAIN.replace("EVAL_MODEL", "model")})
    assert finding_set(tmp_path, "train.py", select="DDP009") == set()


def test_a_mask_buffer_registered_whatever_the_version_is_reported(tmp_path: Path) -> None:
    net = FUSED.replace("if not self.fused:", "if True:")
    write_project(tmp_path, {"net.py": net, "train.py": TRAIN.replace("EVAL_MODEL", "model")})
    assert finding_set(tmp_path, "train.py", select="DDP009") == {("train.py", 37, "DDP009")}


def _compiled(text: str) -> str:
    return text.replace("model = Net(16).cuda()\n", "model = Net(16).cuda()\n    model = torch.compile(model)\n")


def test_a_compiled_network_without_buffers_is_clean(tmp_path: Path) -> None:
    # The compiled wrapper holds the network it is given: its buffers are that network's.
    write_project(tmp_path, {"net.py": NET.replace("BUFFER", "self.scale = 1.0"),
                             "train.py": _compiled(TRAIN).replace("EVAL_MODEL", "model")})
    assert finding_set(tmp_path, "train.py", select="DDP009") == set()


def test_a_compiled_network_with_buffers_is_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"net.py": NET.replace("BUFFER", BUFFER),
                             "train.py": _compiled(TRAIN).replace("EVAL_MODEL", "model")})
    assert finding_set(tmp_path, "train.py", select="DDP009") == {("train.py", 38, "DDP009")}


def test_a_network_the_lint_cannot_read_is_clean(tmp_path: Path) -> None:
    # `Net` comes from an outside package: its buffers are unknown, and unknown is no finding.
    write_project(tmp_path, {"train.py": TRAIN.replace("EVAL_MODEL", "model").replace("from net import Net",
                                                                                        "from gptlib import Net")})
    assert finding_set(tmp_path, "train.py", select="DDP009") == set()
