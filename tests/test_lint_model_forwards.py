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


REBOUND_METHOD = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Flow(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, dim))

        def forward(self, x):
            z = self.net(x)
            return z, z.abs().log().sum(1)

        def log_prob(self, x):
            z, logdet = self.forward(x)
            return -0.5 * z.pow(2).sum(1) + logdet


    def train_epoch(model, loader, optimizer, log_every=10):
        model.train()
        for i, x in enumerate(loader):
            loss = -model.log_prob(x.cuda()).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i % log_every == 0:
                with torch.no_grad():
                    z, _ = model(x.cuda())
                print(i, loss.item(), z.std().item())


    def main(local_rank, epochs=3):
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = Flow(8).cuda()
        model = DDP(model, device_ids=[local_rank])
        # expose the network's own methods on the wrapper
        model.log_prob = model.module.log_prob
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(epochs):
            train_epoch(model, [torch.randn(16, 8)], optimizer)
        dist.destroy_process_group()
"""


def test_a_method_of_the_inner_module_rebound_on_the_wrapper_bypasses_it(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": REBOUND_METHOD}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == [24]
    # The loss goes through the wrapper's forward: the rebound method is not the training step.
    through = REBOUND_METHOD.replace("loss = -model.log_prob(x.cuda()).mean()",
                                     "z, logdet = model(x.cuda())\n            loss = (0.5 * z.pow(2).sum(1) - logdet).mean()")
    findings = lint_project(tmp_path, {"train.py": through}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == []
    # Rebound only for evaluation, which runs under no_grad.
    evaluated = REBOUND_METHOD.replace(
        "            loss = -model.log_prob(x.cuda()).mean()\n",
        "            z, logdet = model(x.cuda())\n"
        "            loss = (0.5 * z.pow(2).sum(1) - logdet).mean()\n",
    ).replace(
        "            train_epoch(model, [torch.randn(16, 8)], optimizer)\n",
        "            train_epoch(model, [torch.randn(16, 8)], optimizer)\n"
        "            with torch.no_grad():\n"
        "                print(model.log_prob(torch.randn(16, 8).cuda()).mean().item())\n",
    )
    findings = lint_project(tmp_path, {"train.py": evaluated}, "train.py", select="DDP013")
    assert _lines(findings, "DDP013") == []
