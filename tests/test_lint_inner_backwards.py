"""The module inside DDP trained beside the wrapper (DDP013), through `ddpcheck lint`: a part of
the inner module whose loss gets a backward of its own (its gradients stay local) against one
added to the wrapper's loss (one backward: synchronised), and a step helper, called by the step
function the loop calls, that is handed `model.module`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

COMPRESSION = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from codec import Codec


    def train_epoch(net, loader, optimizer, aux_optimizer):
        net.train()
        for points in loader:
            points = points.cuda()
            optimizer.zero_grad()
            aux_optimizer.zero_grad()
            out = net(points)
            loss = out["loss"].mean()
            AUX
            optimizer.step()
            aux_optimizer.step()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(Codec().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(net.module.main_parameters(), lr=1e-4)
        aux_optimizer = torch.optim.Adam(net.module.entropy.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(list(range(8)))
        for epoch in range(10):
            train_epoch(net, loader, optimizer, aux_optimizer)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

CODEC = """\
    import torch
    from torch import nn


    class EntropyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.quantiles = nn.Parameter(torch.zeros(8, 3))

        def aux_loss(self):
            return self.quantiles.abs().sum()

        def update_tables(self):
            self.quantiles.data.clamp_(-1, 1)


    class Codec(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(3, 8)
            self.entropy = EntropyModel()

        def main_parameters(self):
            return self.encoder.parameters()

        def forward(self, x):
            return {"loss": self.encoder(x).pow(2)}
    """


def _lint_codec(tmp_path, aux: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"codec.py": CODEC, "train.py": COMPRESSION.replace("AUX", aux)})
    return finding_set(tmp_path, "train.py", select="DDP013")


def test_a_part_of_the_inner_module_back_propagated_on_its_own_is_reported(tmp_path):
    aux = "loss.backward()\n            aux_loss = net.module.entropy.aux_loss()\n            aux_loss.backward()"
    assert _lint_codec(tmp_path, aux) == {("train.py", 19, "DDP013")}
    # Through another name and a scaling: the same backward of its own.
    aux = "loss.backward()\n            aux = net.module.entropy.aux_loss()\n            (0.1 * aux).backward()"
    assert _lint_codec(tmp_path, aux) == {("train.py", 19, "DDP013")}


def test_a_part_of_the_inner_module_in_the_wrappers_backward_is_clean(tmp_path):
    # One backward of the sum: each parameter's gradient is summed before DDP's hook fires.
    aux = "aux_loss = net.module.entropy.aux_loss()\n            (loss + aux_loss).backward()"
    assert _lint_codec(tmp_path, aux) == set()
    aux = "total = loss\n            total = total + 0.1 * net.module.entropy.aux_loss()\n            total.backward()"
    assert _lint_codec(tmp_path, aux) == set()


def test_upkeep_of_a_part_of_the_inner_module_is_clean(tmp_path):
    aux = "loss.backward()\n            net.module.entropy.update_tables()"
    assert _lint_codec(tmp_path, aux) == set()
    # Read out for logging only.
    aux = "loss.backward()\n            aux_value = net.module.entropy.aux_loss().item()"
    assert _lint_codec(tmp_path, aux) == set()


TRAINER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from steps import forward_voice
    from voice import Voice


    class Trainer:
        def __init__(self, local_rank):
            self.model = DDP(Voice().cuda(), device_ids=[local_rank])
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

        def _train_step(self, batch):
            mels, codes = batch
            outputs = forward_voice(MODEL, mels, codes)
            return outputs["loss"]

        def train(self, loader, epochs):
            for epoch in range(epochs):
                self.model.train()
                for batch in loader:
                    loss = self._train_step(batch)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        Trainer(local_rank).train(torch.utils.data.DataLoader(list(range(8))), 3)
        dist.destroy_process_group()
    """

STEPS = """\
    from torch import nn


    def forward_voice(model, mels, codes):
        actual = model.module if isinstance(model, nn.DataParallel) else model
        cond = actual.get_conditioning(mels)
        logits = actual.head(cond + actual.embedding(codes))
        return {"loss": logits.logsumexp(-1).mean()}
    """

VOICE = """\
    from torch import nn


    class Voice(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(80, 64)
            self.embedding = nn.Embedding(100, 64)
            self.head = nn.Linear(64, 100)

        def get_conditioning(self, mels):
            return self.encoder(mels)

        def forward(self, mels, codes):
            return self.head(self.get_conditioning(mels) + self.embedding(codes))
    """


def _lint_voice(tmp_path, model: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"steps.py": STEPS, "voice.py": VOICE, "train.py": TRAINER.replace("MODEL", model)})
    return finding_set(tmp_path, "train.py", select="DDP013")


def test_a_step_helper_handed_the_inner_module_two_calls_below_the_loop_is_reported_where_it_is_handed(tmp_path):
    assert _lint_voice(tmp_path, "self.model.module") == {("train.py", 18, "DDP013")}


def test_a_step_helper_handed_the_wrapper_is_clean(tmp_path):
    # It unwraps only a DataParallel; the DDP model's forward is not what it calls, but what it
    # is handed is the wrapper, and this rule follows what the step chose.
    assert _lint_voice(tmp_path, "self.model") == set()


DIFFUSION = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(16, 16)

        def forward(self, x, t):
            return self.net(x) * t[:, None]


    class Diffusion:
        def __init__(self, model, steps=1000):
            self.model = model
            self.steps = steps

        def _v_loss(self, xt, t, target):
            return F.mse_loss(self.model(xt, t), target)

        def loss(self, x0):
            t = torch.rand(x0.shape[0], device=x0.device)
            noise = torch.randn_like(x0)
            return self._v_loss(x0 + noise, t, noise)


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        denoiser = Denoiser().cuda()
        diffusion = Diffusion(denoiser)
        denoiser = DDP(denoiser, device_ids=[rank])
        optimizer = torch.optim.AdamW(denoiser.parameters(), lr=1e-4)
        for x0 in torch.utils.data.DataLoader(torch.randn(64, 16), batch_size=8):
            loss = diffusion.loss(x0.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_forward_two_calls_below_the_loop_on_the_network_kept_before_the_wrap_is_reported(tmp_path):
    write_project(tmp_path, {"train.py": DIFFUSION})
    assert finding_set(tmp_path, "train.py", select="DDP013") == {("train.py", 25, "DDP013")}
    # Built on the wrapper: its forward goes through DDP.
    write_project(tmp_path, {"train.py": DIFFUSION.replace(
        "        diffusion = Diffusion(denoiser)\n        denoiser = DDP(denoiser, device_ids=[rank])\n",
        "        denoiser = DDP(denoiser, device_ids=[rank])\n        diffusion = Diffusion(denoiser)\n")})
    assert finding_set(tmp_path, "train.py", select="DDP013") == set()
