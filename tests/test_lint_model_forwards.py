"""Where the DDP model and its forward are, read through `ddpcheck lint`: a wrap made on an object
from outside its class, networks whose forward makes no collective, and the ways people bypass the
wrapper. Each test writes a small project in the style of real training code and checks the
finding together with its clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


WRAPPED_FROM_OUTSIDE = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(16, 8)

        def forward(self, x):
            return self.body(x)


    class Trainer:
        def __init__(self, device):
            self.device = device
            self.model = Encoder().to(device)
            self.opt = None

        def fit(self, loader, epochs):
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
            for epoch in range(epochs):
                self.run_epoch(loader)

        def run_epoch(self, loader):
            for x in loader:
                loss = self.model(x.to(self.device)).pow(2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()


    def worker(rank):
        dist.init_process_group("nccl")
        torch.cuda.set_device(rank)
        trainer = Trainer(torch.device(f"cuda:{rank}"))
        trainer.model = DDP(trainer.model, device_ids=[rank])
        trainer.fit([torch.randn(4, 16)], epochs=2)
        dist.destroy_process_group()
"""


def test_a_wrap_set_on_the_object_by_its_caller_is_what_the_methods_train(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": WRAPPED_FROM_OUTSIDE}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == []
    # Set on the object only under a condition: the plain module may still be the one trained,
    # but which one is unknown, so nothing is said either way about the call.
    guarded = WRAPPED_FROM_OUTSIDE.replace(
        "        trainer.model = DDP(trainer.model, device_ids=[rank])\n",
        "        if dist.get_world_size() > 1:\n"
        "            trainer.model = DDP(trainer.model, device_ids=[rank])\n")
    findings = lint_project(tmp_path, {"train.py": guarded}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == []
    # The caller wraps the model into another attribute and the methods still call the plain one.
    aside = WRAPPED_FROM_OUTSIDE.replace("trainer.model = DDP(trainer.model,", "trainer.ddp = DDP(trainer.model,")
    findings = lint_project(tmp_path, {"train.py": aside}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == [29]


def test_a_wrap_set_by_the_method_that_calls_the_step_is_followed_up_the_calls(tmp_path: Path) -> None:
    inside = WRAPPED_FROM_OUTSIDE.replace(
        "        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)\n",
        "        self.model = DDP(self.model, device_ids=[self.device.index])\n"
        "        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)\n",
    ).replace("        trainer.model = DDP(trainer.model, device_ids=[rank])\n", "")
    findings = lint_project(tmp_path, {"train.py": inside}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == []


SAMPLES_ON_RANK_ZERO = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from nets.blocks import Generator


    @torch.no_grad()
    def sample(net, z):
        return net(z)


    def main(rank, epochs=2):
        dist.init_process_group("nccl")
        torch.cuda.set_device(rank)
        gen = DDP(Generator(32).cuda(rank), device_ids=[rank])
        opt = torch.optim.Adam(gen.parameters(), lr=2e-4)
        for epoch in range(epochs):
            z = torch.randn(8, 32, device=rank)
            loss = gen(z).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0:
                torch.save(sample(gen, z), f"sample_{epoch}.pt")
        dist.destroy_process_group()
"""

BLOCKS = """\
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, dim, norm=nn.InstanceNorm1d):
            super().__init__()
            self.norm = norm(dim{extra})
            self.lin = nn.Linear(dim, dim)

        def forward(self, x):
            return self.lin(self.norm(x))


    class Generator(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.blocks = nn.Sequential(Block(dim), Block(dim))

        def forward(self, z):
            return self.blocks(z)
"""


def _sampling_project(extra: str) -> dict[str, str]:
    return {"train.py": SAMPLES_ON_RANK_ZERO, "nets/__init__.py": "",
            "nets/blocks.py": BLOCKS.replace("{extra}", extra)}


def test_instance_norm_without_running_statistics_gives_the_forward_no_buffers(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, _sampling_project(""), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # Running statistics asked for: the forward broadcasts them, on rank 0 alone.
    findings = lint_project(tmp_path, _sampling_project(", track_running_stats=True"), "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [25]
