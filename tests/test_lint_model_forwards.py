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


HELD_BY_TRAINER = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    class Trainer:
        def __init__(self, model, optimizer, device, out="model.pt"):
            self.model = model
            self.optimizer = optimizer
            self.device = device
            self.out = out

        def train(self, loader, epochs):
            for epoch in range(epochs):
                for x in loader:
                    loss = self.model(x.to(self.device)).pow(2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                self.save(epoch)

        def save(self, epoch):
            self.model.cpu()
            if not dist.is_initialized() or dist.get_rank() == 0:
                torch.save(self.model.state_dict(), f"{self.out}.{epoch}")
            self.model.to(self.device)


    def main(args):
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        if args.ddp:
            dist.init_process_group("nccl")
            torch.cuda.set_device(args.local_rank)
            net = DistributedDataParallel(net.to(args.device), device_ids=[args.local_rank])
        else:
            net = net.to(args.device)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        Trainer(net, optimizer, args.device).train([torch.randn(4, 8)], 3)
"""


def test_a_wrapper_handed_to_a_trainer_and_moved_to_the_cpu_in_its_method(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": HELD_BY_TRAINER}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [24, 27]
    # Only a `.to(device)`: it may move nothing, which the lint cannot tell from here.
    lone = HELD_BY_TRAINER.replace("            self.model.cpu()\n", "")
    findings = lint_project(tmp_path, {"train.py": lone}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []
    # Never handed the wrapper: the plain model may be moved as the method likes.
    plain = HELD_BY_TRAINER.replace("Trainer(net, optimizer", "Trainer(net.module if args.ddp else net, optimizer")
    findings = lint_project(tmp_path, {"train.py": plain}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []
    # The attribute is rebound by another method (it may hold something else by then).
    rebound = HELD_BY_TRAINER.replace(
        "        def save(self, epoch):\n",
        "        def attach(self, model):\n"
        "            self.model = model\n\n"
        "        def save(self, epoch):\n")
    findings = lint_project(tmp_path, {"train.py": rebound}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []


RANK_IN_CONFIG = """\
    import os
    import torch
    import torch.distributed as dist


    def on_logging_process(config):
        return config.get("rank", 0) == 0


    def run(config, model, loader, val_loader):
        config["rank"] = int(os.environ["RANK"])
        dist.init_process_group("nccl")
        for epoch in range(config["epochs"]):
            for x in loader:
                model(x).mean().backward()
            if on_logging_process(config):
                val = torch.stack([model(x).mean() for x in val_loader]).mean()
                dist.all_reduce(val)
                print(epoch, val.item() / dist.get_world_size())
"""


def test_the_rank_read_from_a_config_dict_with_get_makes_a_rank_guard(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RANK_IN_CONFIG}, "train.py", select="DDP009,DDP020")
    assert _lines(findings, "DDP009") == [18]
    assert _lines(findings, "DDP020") == []
    # Another entry of the dict is no rank.
    other = RANK_IN_CONFIG.replace('config.get("rank", 0) == 0', 'config.get("stage", 0) == 0')
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []


FROZEN_AFTER_WRAP = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class CaptionModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.vision = nn.Linear(32, 16)
            self.bridge = nn.Linear(16, 16)
            self.decoder = nn.Linear(16, 100)

        def forward(self, x):
            return self.decoder(self.bridge(self.vision(x)))


    def train(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        model = CaptionModel().to(rank)
        model = DDP(model, device_ids=[rank])

        # only the bridge is fine-tuned
        for name, param in model.named_parameters():
            if "bridge" in name:
                param.requires_grad = True
            else:
                param.requires_grad = False

        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        for step in range(100):
            loss = model(torch.randn(4, 32, device=rank)).logsumexp(1).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
"""


def test_parameters_frozen_after_the_wrap(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": FROZEN_AFTER_WRAP}, "train.py", select="DDP026")
    assert _lines(findings, "DDP026") == [24]
    # Frozen first, then wrapped: DDP never waits for them.
    before = FROZEN_AFTER_WRAP.replace("        model = DDP(model, device_ids=[rank])\n\n", "").replace(
        "                param.requires_grad = False\n",
        "                param.requires_grad = False\n        model = DDP(model, device_ids=[rank])\n")
    findings = lint_project(tmp_path, {"train.py": before}, "train.py", select="DDP026")
    assert _lines(findings, "DDP026") == []
    # DDP told that some parameters may get no gradient.
    told = FROZEN_AFTER_WRAP.replace("DDP(model, device_ids=[rank])", "DDP(model, device_ids=[rank], find_unused_parameters=True)")
    findings = lint_project(tmp_path, {"train.py": told}, "train.py", select="DDP026")
    assert _lines(findings, "DDP026") == []
    # Set from an expression the lint does not evaluate: not known to freeze anything.
    unfrozen = FROZEN_AFTER_WRAP.replace("param.requires_grad = False", "param.requires_grad = name.startswith('decoder')")
    findings = lint_project(tmp_path, {"train.py": unfrozen}, "train.py", select="DDP026")
    assert _lines(findings, "DDP026") == []


def test_parameters_frozen_after_training_for_the_final_evaluation(tmp_path: Path) -> None:
    # Every parameter frozen once training is over: no backward follows, so DDP waits for nothing.
    body = FROZEN_AFTER_WRAP.split("        # only the bridge is fine-tuned\n")
    head, rest = body[0], body[1]
    loop, training = rest.split("\n\n", 1)
    after = head + training + "\n        # evaluation only from here on\n" + loop + "\n        print(model(torch.randn(4, 32, device=rank)).argmax(1))\n"
    findings = lint_project(tmp_path, {"train.py": after}, "train.py", select="DDP026")
    assert _lines(findings, "DDP026") == []
