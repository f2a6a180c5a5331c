"""What the lint reads of a network and of a DDP wrapper, on mechanisms seen on public scripts of
batch 27: the buffers of torch's own layers (DDP009), each through `ddpcheck lint` on a small
project written in the style of the scripts, with a variant that must stay silent or be reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# Rank 0 evaluates through the DDP wrapper after training, in a function that never
# back-propagates: a hang only when DDP's forward makes a collective, that is when the wrapped
# network has buffers to broadcast or gradients are on (the forward may rebuild its buckets).
RANK0_EVAL = """\
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def final_eval(ddp_model, dataset, rank):
        if rank == 0:
            ddp_model.eval()
            {context}:
                for x, y in DataLoader(dataset, batch_size=64):
                    out = ddp_model(x.cuda())


    def main():
        dist.init_process_group(backend="nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dataset = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        model = nn.Sequential(nn.Linear(10, 64), {middle}, nn.Linear(64, 2)).to(local_rank)
        ddp_model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-3)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = nn.functional.cross_entropy(ddp_model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        final_eval(ddp_model, dataset, rank)
        torch.save(ddp_model.module.state_dict(), "model.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

NO_GRAD = "with torch.no_grad()"
GRAD_ON = "with torch.autocast(device_type=\"cuda\")"


def test_rank_zero_forward_of_a_sequential_of_bufferless_layers_is_clean(tmp_path: Path) -> None:
    files = {"train.py": RANK0_EVAL.format(context=NO_GRAD, middle="nn.ReLU()")}
    assert lines(tmp_path, files, "DDP009") == []


def test_rank_zero_forward_of_a_sequential_with_batchnorm_is_reported(tmp_path: Path) -> None:
    files = {"train.py": RANK0_EVAL.format(context=NO_GRAD, middle="nn.BatchNorm1d(64)")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 13)]


def test_rank_zero_forward_of_a_sequential_with_an_outside_layer_is_reported(tmp_path: Path) -> None:
    # A layer from another library: its buffers are unknown, so the forward may broadcast.
    files = {"train.py": RANK0_EVAL.format(context=NO_GRAD, middle="torchlayers.Normalize(64)").replace(
        "from torch import nn\n", "from torch import nn\n    import torchlayers\n")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 14)]


def test_rank_zero_forward_of_bufferless_layers_with_gradients_on_is_reported(tmp_path: Path) -> None:
    # With gradients on, DDP's forward may rebuild its buckets (a broadcast from rank 0), buffers
    # or not: only a forward under no_grad is known to make no collective.
    files = {"train.py": RANK0_EVAL.format(context=GRAD_ON, middle="nn.ReLU()")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 13)]


# A perceptual loss around a pretrained recogniser, frozen in its constructor and wrapped in DDP
# beside a generator without BatchNorm.
FACE_NET = """\
    import torch
    from torch import nn


    class Recogniser(nn.Module):
        def __init__(self, depth=50):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.PReLU(64))
            self.head = nn.Linear(64, 512)

        def forward(self, x):
            return self.head(self.body(x).mean((2, 3)))
"""

ID_LOSS = """\
    import torch
    from torch import nn
    from facenet import Recogniser


    class IdentityLoss(nn.Module):
        def __init__(self, weights, device="cuda"):
            super().__init__()
            self.net = Recogniser(depth=50).to(device)
            self.net.load_state_dict(torch.load(weights, map_location="cpu"))
            self.pool = nn.AdaptiveAvgPool2d((112, 112))
            {extra}

        def forward(self, fake, real):
            a = self.net(self.pool(fake))
            b = self.net(self.pool(real)).detach()
            return (1 - (a * b).sum(1)).mean()
"""

GAN_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch import nn
    from losses import IdentityLoss


    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(64, 3, 3, padding=1))

        def forward(self, x):
            return self.net(x)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
        generator = Generator().cuda()
        id_loss = IdentityLoss("weights/recogniser.pth", "cuda")
        generator = nn.parallel.DistributedDataParallel(generator, device_ids=[args.local_rank])
        id_loss = nn.parallel.DistributedDataParallel(id_loss, device_ids=[args.local_rank], broadcast_buffers=False)
        optimizer = torch.optim.Adam(generator.parameters(), lr=2e-3)
        for step in range(1000):
            {mode}
            real = torch.randn(4, 3, 256, 256).cuda()
            fake = generator(real)
            loss = id_loss(fake, real)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _gan(extra: str, mode: str = "pass") -> dict[str, str]:
    return {"facenet.py": FACE_NET, "losses.py": ID_LOSS.format(extra=extra),
            "train.py": GAN_SCRIPT.format(mode=mode)}


def test_loss_network_frozen_in_its_constructor_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _gan("self.net.eval()"), "DDP012") == []


def test_loss_network_left_in_train_mode_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _gan("pass"), "DDP012") == [("train.py", 26)]


def test_loss_network_frozen_but_put_back_in_train_mode_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _gan("self.net.eval()", mode="id_loss.train()"), "DDP012") == [("train.py", 26)]


def test_loss_network_with_a_second_batchnorm_part_not_frozen_is_reported(tmp_path: Path) -> None:
    extra = "self.net.eval()\n            self.proj = nn.Sequential(nn.Linear(512, 128), nn.BatchNorm1d(128))"
    assert lines(tmp_path, _gan(extra), "DDP012") == [("train.py", 26)]


# Distillation: a pretrained teacher wrapped in DDP and kept in eval mode, beside the student the
# training loop puts in train mode.
DISTILL = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torchvision.models as models
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel


    class Student(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU())
            self.fc = nn.Linear(32, 1000)

        def forward(self, x):
            return self.fc(self.features(x).mean((2, 3)))


    def train(loader, student, teacher, optimizer):
        student.train()
        teacher.eval()
        for images, _ in loader:
            images = images.cuda()
            with torch.no_grad():
                target = teacher(images).softmax(1)
            loss = -(target * student(images).log_softmax(1)).sum(1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def worker(gpu, world_size):
        torch.cuda.set_device(gpu)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=world_size)
        teacher = models.resnet34(pretrained=True).cuda()
        teacher = DistributedDataParallel(teacher, device_ids=[gpu])
        for p in teacher.parameters():
            p.requires_grad = False
        student = Student().cuda(gpu)
        student = DistributedDataParallel(student, device_ids=[gpu])
        optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 3, 32, 32), torch.zeros(64)))
        for epoch in range(10):
            train(loader, student, {teacher})
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
"""


def test_frozen_teacher_beside_a_trained_student_is_not_reported(tmp_path: Path) -> None:
    files = {"train.py": DISTILL.replace("{teacher}", "teacher, optimizer")}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 40)]


# A template's evaluation helper moves the model it is handed to the device of the options,
# the DDP wrapper on the distributed path.
TEMPLATE_HELPERS = """\
    import torch


    def test(model, loader, args):
        correct = 0
        model.to(args.device)
        model.eval()
        with torch.no_grad():
            for data, target in loader:
                out = model(data.to(args.device))
                correct += (out.argmax(1) == target.to(args.device)).sum().item()
        return correct / len(loader.dataset)
"""

TEMPLATE_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from helpers import test


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            return self.fc(x)


    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--distributed", action="store_true")
    args = parser.parse_args()
    args.device = torch.device(f"cuda:{args.gpu}")
    if args.distributed:
        args.gpu = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(args.gpu)
        dist.init_process_group("nccl")
    model = Net(){moved}
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    else:
        model = model.to(args.device)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 16), torch.zeros(32).long()))
    print(test(model, loader, args))
"""


def test_helper_moving_a_wrapper_whose_module_never_moved_is_reported(tmp_path: Path) -> None:
    files = {"helpers.py": TEMPLATE_HELPERS, "train.py": TEMPLATE_SCRIPT.replace("{moved}", "")}
    assert lines(tmp_path, files, "DDP014") == [("helpers.py", 6)]


def test_helper_moving_a_wrapper_whose_module_was_moved_first_is_clean(tmp_path: Path) -> None:
    # The module is on its GPU before the wrap: the helper's move may move nothing.
    files = {"helpers.py": TEMPLATE_HELPERS, "train.py": TEMPLATE_SCRIPT.replace("{moved}", ".cuda(args.gpu)")}
    assert lines(tmp_path, files, "DDP014") == []


# A trainer converts the networks it is handed to channels-last in its constructor; the script
# hands it the DDP wrappers.
TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, cfg, net_G, opt_G):
            self.cfg = cfg
            self.net_G = net_G
            self.opt_G = opt_G
            if cfg.channels_last:
                self.net_G = self.net_G.to({conversion})

        def step(self, data):
            loss = self.net_G(data).mean()
            self.opt_G.zero_grad()
            loss.backward()
            self.opt_G.step()


    def main(cfg, local_rank):
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", init_method="env://")
        net_G = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 3, 3)).cuda()
        net_G = DDP(net_G, device_ids=[local_rank])
        opt_G = torch.optim.Adam(net_G.parameters(), lr=1e-4)
        trainer = Trainer(cfg, net_G, opt_G)
        for it in range(cfg.max_iter):
            trainer.step(torch.randn(2, 3, 64, 64).cuda())
        dist.destroy_process_group()
"""


def test_wrapper_converted_to_channels_last_in_a_constructor_is_reported(tmp_path: Path) -> None:
    files = {"train.py": TRAINER.format(conversion="memory_format=torch.channels_last")}
    assert lines(tmp_path, files, "DDP014") == [("train.py", 13)]


def test_wrapper_moved_to_its_own_device_in_a_constructor_is_clean(tmp_path: Path) -> None:
    files = {"train.py": TRAINER.format(conversion="'cuda'")}
    assert lines(tmp_path, files, "DDP014") == []


def test_helper_moving_a_wrapper_of_a_module_a_builder_made_is_clean(tmp_path: Path) -> None:
    # The builder may move the module before returning it: not known to be unmoved.
    script = TEMPLATE_SCRIPT.replace("{moved}", "").replace(
        "    model = Net()\n", "    def build():\n        net = Net()\n        net.cuda()\n        return net\n\n\n    model = build()\n")
    files = {"helpers.py": TEMPLATE_HELPERS, "train.py": script}
    assert lines(tmp_path, files, "DDP014") == []


# A trainer object keeps the DDP wrapper in an attribute; the script moves it through the object.
HELD = """\
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, local_rank):
            self.device = torch.device("cuda", local_rank)
            self.model = nn.Linear(8, 1).to(self.device)
            self.model = DDP(self.model, device_ids=[local_rank])
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

        def step(self):
            loss = self.model(torch.randn(4, 8, device=self.device)).sum()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        trainer = Trainer(local_rank)
        for _ in range(10):
            trainer.step()
        if dist.get_rank() == 0:
            trainer.model.to({target})
            torch.save(trainer.model.module.state_dict(), "model.pt")
        dist.destroy_process_group()
"""


def test_wrapper_held_by_an_object_moved_to_the_cpu_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": HELD.format(target="'cpu'")}, "DDP014") == [("train.py", 30)]


def test_wrapper_held_by_an_object_moved_to_its_device_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": HELD.format(target="trainer.device")}, "DDP014") == []
