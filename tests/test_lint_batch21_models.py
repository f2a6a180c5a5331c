"""The model inside DDP trained in one arm of a stage switch (DDP013), reached through a wrapper
subclass that forwards attribute reads with `__getattribute__` (DDP013), and BatchNorm networks
picked from registries of the project (DDP012), on mechanisms seen on public scripts of batch 21:
each through `ddpcheck lint` on a small project written in the style of the scripts, with a
clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


CAPTION_NET = """\
    import torch
    import torch.nn as nn


    class CaptionNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.logit = nn.Linear(16, 100)

        def forward(self, seq):
            return self.logit(self.embed(seq))

        def sample(self, seq, greedy=True):
            out = self.logit(self.embed(seq[:, 0])).log_softmax(-1)
            word = out.argmax(-1) if greedy else torch.multinomial(out.exp(), 1).squeeze(1)
            return word, out.gather(1, word[:, None])
"""

# Teacher forcing through the wrapper in the first stage, self-critical sampling in the second:
# the sampled log-probabilities that the second stage back-propagates come from the inner module.
CAPTION_TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from net import CaptionNet


    class Trainer:
        def __init__(self, local_rank):
            torch.cuda.set_device(local_rank)
            dist.init_process_group(backend="nccl")
            self.rl_stage = False
            self.model = DistributedDataParallel(CaptionNet().cuda(), device_ids=[local_rank])
            self.optim = torch.optim.Adam(self.model.parameters(), lr=1e-4)

        def forward(self, batch):
            if not self.rl_stage:
                loss = self.model(batch).mean()
            else:
                self.model.eval()
                with torch.no_grad():
                    greedy, _ = self.model.module.sample(batch, greedy=True)
                self.model.train()
                sampled, logp = {sampler}(batch, greedy=False)
                loss = -(logp.squeeze(1) * (sampled - greedy).float()).mean()
            return loss

        def train(self, loader, epochs, rl_start):
            for epoch in range(epochs):
                if epoch == rl_start:
                    self.rl_stage = True
                for batch in loader:
                    loss = self.forward(batch.cuda())
                    loss.backward()
                    self.optim.step()
                    self.optim.zero_grad()
            dist.destroy_process_group()
"""


def test_inner_module_trained_in_the_other_arm_of_a_stage_switch(tmp_path: Path) -> None:
    files = {"net.py": CAPTION_NET, "train.py": CAPTION_TRAINER.format(sampler="self.model.module.sample")}
    assert lines(tmp_path, files, "DDP013") == [("train.py", 23)]


def test_sampling_through_the_wrapper_in_the_second_stage_is_clean(tmp_path: Path) -> None:
    files = {"net.py": CAPTION_NET, "train.py": CAPTION_TRAINER.format(sampler="self.model")}
    assert lines(tmp_path, files, "DDP013") == []


# A project subclass of DDP that hands the attributes it lacks to the inner module through
# `__getattribute__`: `model.retrieval_loss(batch)` runs the inner module's method.
PARALLEL = """\
    import torch.nn as nn


    class DistributedDataParallel(nn.parallel.DistributedDataParallel):
        {getattr_def}

        def state_dict(self, *args, **kwargs):
            return self.module.state_dict(*args, **kwargs)
"""

GETATTRIBUTE = """def __getattr__(self, key):
            try:
                return super(DistributedDataParallel, self).__getattr__(key)
            except AttributeError:
                return self.module.__getattribute__(key)"""

RETRIEVAL_NET = """\
    import torch.nn as nn


    class Retrieval(nn.Module):
        def __init__(self):
            super().__init__()
            self.img_enc = nn.Linear(32, 16)
            self.txt_enc = nn.GRU(8, 16, batch_first=True)

        def forward(self, images, captions):
            return self.img_enc(images), self.txt_enc(captions)[1][-1]

        def retrieval_loss(self, batch):
            img, txt = self(*batch)
            return (img - txt).pow(2).mean()
"""

RETRIEVAL_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from parallel import DistributedDataParallel
    from net import Retrieval


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl")
        model = DistributedDataParallel(Retrieval().cuda(), device_ids=[args.local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
        for epoch in range(10):
            for batch in loader:
                optimizer.zero_grad()
                loss = {step}
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_method_of_the_inner_module_read_through_getattribute_forwarding(tmp_path: Path) -> None:
    files = {"parallel.py": PARALLEL.format(getattr_def=GETATTRIBUTE), "net.py": RETRIEVAL_NET,
             "train.py": RETRIEVAL_SCRIPT.format(step="model.retrieval_loss(batch)")}
    assert lines(tmp_path, files, "DDP013") == [("train.py", 20)]


def test_forward_through_the_forwarding_wrapper_is_clean(tmp_path: Path) -> None:
    files = {"parallel.py": PARALLEL.format(getattr_def=GETATTRIBUTE), "net.py": RETRIEVAL_NET,
             "train.py": RETRIEVAL_SCRIPT.format(step="(lambda o: (o[0] - o[1]).pow(2).mean())(model(*batch))")}
    assert lines(tmp_path, files, "DDP013") == []


def test_wrapper_subclass_without_forwarding_is_clean(tmp_path: Path) -> None:
    # No `__getattr__`: the method is not found on the wrapper (an AttributeError), no silent bypass.
    files = {"parallel.py": PARALLEL.format(getattr_def="find_unused = False"), "net.py": RETRIEVAL_NET,
             "train.py": RETRIEVAL_SCRIPT.format(step="model.retrieval_loss(batch)")}
    assert lines(tmp_path, files, "DDP013") == []


# A model registry of the project whose entries pair a builder function with a checkpoint path,
# and a registry of distiller classes that are handed the networks they train.
CIFAR_MODELS = """\
    import torch.nn as nn


    class ResNet(nn.Module):
        def __init__(self, widths, num_classes=100):
            super().__init__()
            self.conv = nn.Conv2d(3, widths[0], 3, padding=1)
            self.bn = nn.BatchNorm2d(widths[0])
            self.fc = nn.Linear(widths[0], num_classes)

        def forward(self, x):
            return self.fc(self.bn(self.conv(x)).mean((2, 3)))


    class MLP(nn.Module):
        def __init__(self, num_classes=100):
            super().__init__()
            self.fc = nn.Linear(3 * 32 * 32, num_classes)

        def forward(self, x):
            return self.fc(x.flatten(1))


    def resnet8(**kwargs):
        return ResNet([16, 32], **kwargs)


    def resnet32x4(**kwargs):
        return ResNet([64, 128], **kwargs)


    def mlp(**kwargs):
        return MLP(**kwargs)
"""

REGISTRY = """\
    from cifar import resnet8, resnet32x4, mlp

    cifar_model_dict = {{
        "resnet32x4": (resnet32x4, "ckpts/resnet32x4.pth"),
        "resnet8": (resnet8, None),
        {extra}
    }}
"""

DISTILLERS = """\
    import torch.nn as nn


    class Vanilla(nn.Module):
        def __init__(self, student):
            super().__init__()
            self.student = student

        def forward(self, image):
            return self.student(image)


    class KD(nn.Module):
        def __init__(self, student, teacher):
            super().__init__()
            self.student = student
            self.teacher = teacher

        def forward(self, image):
            return self.student(image) - self.teacher(image).detach()


    distiller_dict = {"NONE": Vanilla, "KD": KD}
"""

DISTILL_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from registry import cifar_model_dict
    from distillers import distiller_dict


    def main(args):
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        dist.init_process_group(backend="nccl")
        student = {student}
        distiller = {distiller}
        distiller = DistributedDataParallel(distiller.cuda(), device_ids=[rank])
        optimizer = torch.optim.SGD(distiller.parameters(), lr=0.05)
        for step in range(100):
            loss = distiller(torch.randn(8, 3, 32, 32).cuda()).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--student", default="resnet8")
        parser.add_argument("--distiller", default="NONE")
        main(parser.parse_args())
"""

FROM_TABLE = "cifar_model_dict[args.student][0](num_classes=100)"


def test_network_from_a_registry_of_builder_and_checkpoint_pairs(tmp_path: Path) -> None:
    files = {"cifar.py": CIFAR_MODELS, "registry.py": REGISTRY.format(extra=""), "distillers.py": DISTILLERS,
             "train.py": DISTILL_SCRIPT.format(student=FROM_TABLE, distiller="student")}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 16)]


def test_registry_with_a_network_without_batchnorm_is_clean(tmp_path: Path) -> None:
    # `--student mlp` picks a network with no BatchNorm: which one runs is unknown.
    files = {"cifar.py": CIFAR_MODELS, "registry.py": REGISTRY.format(extra='"mlp": (mlp, None),'),
             "distillers.py": DISTILLERS,
             "train.py": DISTILL_SCRIPT.format(student=FROM_TABLE, distiller="student")}
    assert lines(tmp_path, files, "DDP012") == []


def test_distiller_class_picked_by_key_is_handed_a_batchnorm_network(tmp_path: Path) -> None:
    files = {"cifar.py": CIFAR_MODELS, "registry.py": REGISTRY.format(extra=""), "distillers.py": DISTILLERS,
             "train.py": DISTILL_SCRIPT.format(student="resnet8(num_classes=100)",
                                               distiller="distiller_dict[args.distiller](student)")}
    files["train.py"] = files["train.py"].replace("from registry import cifar_model_dict", "from cifar import resnet8")
    assert lines(tmp_path, files, "DDP012") == [("train.py", 16)]


def test_distiller_class_picked_by_key_handed_a_network_without_batchnorm_is_clean(tmp_path: Path) -> None:
    files = {"cifar.py": CIFAR_MODELS, "registry.py": REGISTRY.format(extra=""), "distillers.py": DISTILLERS,
             "train.py": DISTILL_SCRIPT.format(student="mlp(num_classes=100)",
                                               distiller="distiller_dict[args.distiller](student)")}
    files["train.py"] = files["train.py"].replace("from registry import cifar_model_dict", "from cifar import mlp")
    assert lines(tmp_path, files, "DDP012") == []
