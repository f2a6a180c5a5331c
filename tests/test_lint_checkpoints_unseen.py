"""Checkpoints written the ways fine-tuning scripts write them, through `ddpcheck lint`:
`save_pretrained` of the model DDP wraps is a checkpoint every rank writes to one directory
unless a rank guard keeps it to one process."""

from __future__ import annotations

import textwrap

from tests.helpers import finding_set as _findings
from tests.helpers import write_project as _write
from tests.helpers import lint_project


def _variant(text: str, *changes: tuple[str, str]) -> str:
    """`text` with each (old, new) pair replaced: old must be there, and the result must parse."""
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    compile(textwrap.dedent(text), "variant", "exec")
    return text

FINETUNE = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import AutoModelForCausalLM, AutoTokenizer


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--model", default="gpt2")
        parser.add_argument("--out", default="out")
        parser.add_argument("--epochs", type=int, default=3)
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model).cuda(local_rank)
        model = DDP(model, device_ids=[local_rank])
        opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
        for epoch in range(args.epochs):
            for batch in make_loader(tokenizer, epoch):
                loss = model(**batch).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
            to_save = model.module if hasattr(model, "module") else model
            to_save.save_pretrained(os.path.join(args.out, f"epoch{epoch}"))
        tokenizer.save_pretrained(args.out)
        model.module.save_pretrained(os.path.join(args.out, "final"))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_save_pretrained_of_the_wrapped_model_on_every_rank(tmp_path):
    _write(tmp_path, {"finetune.py": FINETUNE})
    assert _findings(tmp_path, "finetune.py", select="DDP010") == {
        ("finetune.py", 30, "DDP010"), ("finetune.py", 32, "DDP010")}


def test_save_pretrained_on_rank_zero_or_per_rank_is_clean(tmp_path):
    guarded = _variant(
        FINETUNE,
        ('            to_save.save_pretrained(os.path.join(args.out, f"epoch{epoch}"))\n',
         '            if dist.get_rank() == 0:\n'
         '                to_save.save_pretrained(os.path.join(args.out, f"epoch{epoch}"))\n'),
        ('        model.module.save_pretrained(os.path.join(args.out, "final"))\n',
         '        model.module.save_pretrained(os.path.join(args.out, f"final-rank{dist.get_rank()}"))\n'),
    )
    _write(tmp_path, {"finetune.py": guarded})
    # The tokenizer's files are no checkpoint of the trained model.
    assert _findings(tmp_path, "finetune.py", select="DDP010") == set()


def test_save_pretrained_of_a_model_ddp_does_not_wrap_is_not_reported(tmp_path):
    # A frozen teacher kept outside DDP: nothing says what its `save_pretrained` is.
    teacher = _variant(
        FINETUNE,
        ('            to_save = model.module if hasattr(model, "module") else model\n'
         '            to_save.save_pretrained(os.path.join(args.out, f"epoch{epoch}"))\n',
         '            teacher.save_pretrained(os.path.join(args.out, f"epoch{epoch}"))\n'),
        ('        model.module.save_pretrained(os.path.join(args.out, "final"))\n', ''),
    )
    _write(tmp_path, {"finetune.py": teacher})
    assert _findings(tmp_path, "finetune.py", select="DDP010") == set()


CKPT_UTILS = """\
    import os

    import torch
    import torch.distributed as dist


    def is_main_process():
        return not dist.is_initialized() or dist.get_rank() == 0


    def save_checkpoint(state, out_dir, name="last.pth"):
        if not is_main_process():
            return
        os.makedirs(out_dir, exist_ok=True)
        torch.save(state, os.path.join(out_dir, name))


    def dump_state(state, out_dir, name="last.pth"):
        os.makedirs(out_dir, exist_ok=True)
        torch.save(state, os.path.join(out_dir, name))
    """

SEG_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils.checkpoint import save_checkpoint


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(build_segmenter().cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for epoch in range(50):
            for images, masks in make_loader(epoch):
                loss = seg_loss(model(images.cuda()), masks.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
            save_checkpoint({"model": model.module.state_dict(), "epoch": epoch}, "runs")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_save_helper_of_another_module_guarded_inside_is_clean(tmp_path):
    _write(tmp_path, {"utils/__init__.py": "", "utils/checkpoint.py": CKPT_UTILS, "train_seg.py": SEG_TRAIN})
    assert _findings(tmp_path, "train_seg.py", select="DDP010") == set()


def test_an_unguarded_save_helper_of_another_module_called_on_every_rank(tmp_path):
    train = _variant(SEG_TRAIN, ("save_checkpoint", "dump_state"))
    _write(tmp_path, {"utils/__init__.py": "", "utils/checkpoint.py": CKPT_UTILS, "train_seg.py": train})
    assert _findings(tmp_path, "train_seg.py", select="DDP010") == {("checkpoint.py", 20, "DDP010")}


AUTOENCODER = """\
    import torch
    from torch import nn


    class Encoder(nn.Module):
        def __init__(self, ch):
            super().__init__()
            self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
            self.down = nn.Conv2d(ch, ch, 4, stride=2, padding=1)

        def forward(self, x):
            return self.down(torch.relu(self.conv_in(x)))


    class Decoder(nn.Module):
        def __init__(self, ch):
            super().__init__()
            self.up = nn.ConvTranspose2d(ch, 3, 4, stride=2, padding=1)

        def forward(self, z):
            return self.up(z)


    class Jitter(nn.Module):
        def __init__(self, scale=0.01):
            super().__init__()
            self.scale = scale

        def forward(self, z):
            return z + self.scale * torch.randn_like(z)


    class AutoEncoder(nn.Module):
        def __init__(self, ch=64):
            super().__init__()
            self.encoder = Encoder(ch)
            self.jitter = Jitter()
            self.decoder = Decoder(ch)

        def forward(self, x):
            z = self.encoder(x)
            return self.decoder(self.jitter(z)), z
    """

AE_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from autoencoder import AutoEncoder


    def train(loader, critic, epochs=10):
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        ae = DDP(AutoEncoder().cuda(), device_ids=[local_rank])
        critic = DDP(critic.cuda(), device_ids=[local_rank])
        opt = torch.optim.Adam(ae.parameters(), lr=1e-4)
        for epoch in range(epochs):
            for images in loader:
                images = images.cuda()
                z = ae.module.encoder(images)
                z = ae.module.jitter(z)
                recon = ae.module.decoder(z)
                loss = (recon - images).abs().mean() - critic(recon).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                sample = ae.module.decoder(ae.module.encoder(images[:4]))
        dist.destroy_process_group()


    if __name__ == "__main__":
        train(make_loader(), make_critic())
    """


def test_submodules_with_weights_called_through_the_inner_module_in_the_training_step(tmp_path):
    # The parameter-free jitter and the evaluation under no_grad are not reported; the other
    # model's wrapper (the critic) does not make the autoencoder's step a DDP forward.
    _write(tmp_path, {"autoencoder.py": AUTOENCODER, "train_ae.py": AE_TRAIN})
    # The encoder and the decoder run in one step: one finding, which names the decoder too.
    assert _findings(tmp_path, "train_ae.py", select="DDP013") == {("train_ae.py", 20, "DDP013")}
    [finding] = lint_project(tmp_path, {}, "train_ae.py", select="DDP013")
    assert "also runs it through `ae.module.decoder(...)`" in finding["message"]


def test_the_forward_through_the_wrapper_with_submodules_used_for_evaluation_is_clean(tmp_path):
    fixed = _variant(AE_TRAIN, (
        "                z = ae.module.encoder(images)\n"
        "                z = ae.module.jitter(z)\n"
        "                recon = ae.module.decoder(z)\n",
        "                recon, z = ae(images)\n"))
    _write(tmp_path, {"autoencoder.py": AUTOENCODER, "train_ae.py": fixed})
    assert _findings(tmp_path, "train_ae.py", select="DDP013") == set()


# --- the same seed on every rank (DDP029, off by default) -----------------------------------------

MNIST_LIKE = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP


    class SmallNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.drop = nn.Dropout(0.3)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--epochs", type=int, default=5)
        args = parser.parse_args()
        torch.manual_seed(args.seed)
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(SmallNet().cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = torch.utils.data.DataLoader(load_mnist(), batch_size=64)
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = F.cross_entropy(model(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_the_same_seed_with_dropout_in_a_ddp_script_without_a_distributed_sampler(tmp_path):
    # Every rank reads the whole set (another finding); the dropout masks repeat across ranks too.
    _write(tmp_path, {"mnist_ddp.py": MNIST_LIKE})
    assert _findings(tmp_path, "mnist_ddp.py", select="DDP029") == {("mnist_ddp.py", 27, "DDP029")}


def test_a_seed_offset_by_the_rank_is_clean(tmp_path):
    offset = _variant(MNIST_LIKE, (
        '        torch.manual_seed(args.seed)\n        rank = int(os.environ["RANK"])\n',
        '        rank = int(os.environ["RANK"])\n        torch.manual_seed(args.seed + rank)\n'))
    _write(tmp_path, {"mnist_ddp.py": offset})
    assert _findings(tmp_path, "mnist_ddp.py", select="DDP029") == set()


def test_no_sampler_and_no_dropout_is_clean(tmp_path):
    # Without sharding in sight, only the model's dropout counts: an initialisation draw does not.
    plain = _variant(
        MNIST_LIKE,
        ("            self.drop = nn.Dropout(0.3)\n", "            nn.init.normal_(self.fc1.weight, std=0.02)\n"),
        ("self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))", "self.fc2(F.relu(self.fc1(x.flatten(1))))"),
    )
    _write(tmp_path, {"mnist_ddp.py": plain})
    assert _findings(tmp_path, "mnist_ddp.py", select="DDP029") == set()


HYDRA_TRAIN = """\
    import os

    import hydra
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def run(cfg):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        torch.manual_seed(cfg.seed)
        model = DistributedDataParallel(build_model(cfg).cuda(), device_ids=[local_rank])
        data = NoisySpeech(cfg.data, augment=True)
        loader = DataLoader(data, batch_size=cfg.batch_size, sampler=DistributedSampler(data), num_workers=4)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        for epoch in range(cfg.epochs):
            loader.sampler.set_epoch(epoch)
            for noisy, clean in loader:
                noisy = noisy + 0.01 * torch.randn_like(noisy)
                loss = (model(noisy.cuda()) - clean.cuda()).abs().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()


    @hydra.main(config_path="conf", config_name="config")
    def main(cfg):
        run(cfg)


    if __name__ == "__main__":
        main()
    """


def test_a_seed_from_the_hydra_configuration_is_the_same_on_every_rank(tmp_path):
    _write(tmp_path, {"train.py": HYDRA_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 14, "DDP029")}


SPAWN_LAUNCHER = """\
    import random

    import numpy as np
    import torch
    import torch.multiprocessing as mp

    from worker import train_worker

    if __name__ == "__main__":
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        world_size = torch.cuda.device_count()
        mp.spawn(train_worker, args=(world_size,), nprocs=world_size)
    """

SPAWN_WORKER = """\
    import os
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def train_worker(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29512"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        random.seed(rank)
        np.random.seed(rank)
        torch.manual_seed(rank)
        model = DDP(TinyLM(dropout=0.1).cuda(rank), device_ids=[rank])
        data = TokenDataset("tokens.bin")
        loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for epoch in range(3):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                loss = model(x.cuda(rank), y.cuda(rank))
                opt.zero_grad()
                loss.backward()
                opt.step()
        dist.destroy_process_group()
    """


def test_a_seed_in_the_spawning_process_does_not_reach_the_workers(tmp_path):
    # The spawned workers start a fresh interpreter and skip the `__main__` block: the launcher's
    # seed never reaches them, and they seed with their rank.
    _write(tmp_path, {"launch.py": SPAWN_LAUNCHER, "worker.py": SPAWN_WORKER})
    assert _findings(tmp_path, "launch.py", select="DDP029") == set()


def test_a_seed_at_module_level_runs_in_every_spawned_worker(tmp_path):
    # Outside the `__main__` block the seed runs again in every worker as it imports the script.
    launcher = _variant(SPAWN_LAUNCHER, (
        '    from worker import train_worker\n\n    if __name__ == "__main__":\n',
        '    from worker import train_worker\n\n    torch.manual_seed(1234)\n\n    if __name__ == "__main__":\n'))
    worker = _variant(SPAWN_WORKER, ("        torch.manual_seed(rank)\n", ""))
    _write(tmp_path, {"launch.py": launcher, "worker.py": worker})
    assert _findings(tmp_path, "launch.py", select="DDP029") == {("launch.py", 9, "DDP029")}


# --- loads inside the network's constructor (DDP011) ------------------------------------------------

SEG_NET = """\
    import torch
    from torch import nn


    class Backbone(nn.Module):
        def __init__(self, weights=""):
            super().__init__()
            self.stem = nn.Conv2d(3, 64, 7, stride=2, padding=3)
            self.body = nn.Conv2d(64, 256, 3, padding=1)
            if weights:
                self.load_state_dict(torch.load(weights))


    class Segmenter(nn.Module):
        def __init__(self, num_classes, backbone_weights="", init_from=""):
            super().__init__()
            self.backbone = Backbone(backbone_weights)
            self.head = nn.Conv2d(256, num_classes, 1)
            if init_from:
                self._init_from(init_from)

        def _init_from(self, path):
            state = torch.load(path)
            self.load_state_dict(state["model"], strict=False)

        def forward(self, x):
            return self.head(self.backbone(x))
    """

SEG_NET_TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nets import Segmenter


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--backbone-weights", default="")
        parser.add_argument("--init-from", default="")
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        net = Segmenter(21, args.backbone_weights, args.init_from).cuda()
        model = DDP(net, device_ids=[local_rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for images, masks in make_loader():
            loss = torch.nn.functional.cross_entropy(model(images.cuda()), masks.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()


    if __name__ == "__main__":
        main()
    """


def test_loads_in_the_constructor_of_a_network_built_on_every_rank(tmp_path):
    _write(tmp_path, {"nets.py": SEG_NET, "train.py": SEG_NET_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP011") == {("nets.py", 11, "DDP011"), ("nets.py", 23, "DDP011")}


def test_constructor_loads_with_a_map_location_are_clean(tmp_path):
    fixed = _variant(SEG_NET, ("torch.load(weights)", 'torch.load(weights, map_location="cpu")'),
                     ("torch.load(path)", 'torch.load(path, map_location="cpu")'))
    _write(tmp_path, {"nets.py": fixed, "train.py": SEG_NET_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP011") == set()
