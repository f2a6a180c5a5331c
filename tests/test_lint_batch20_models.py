"""DDP012, DDP013 and DDP009 on the ways batch 20's scripts build, wrap and evaluate their
networks. Each through `ddpcheck lint` on a small project written in the style of the scripts,
with a variant that must stay clean (or must be reported)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], code: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each `code` finding when `target` is linted."""
    return [(Path(f["path"]).name, f["location"]["line"]) for f in lint_project(tmp_path, files, target, select=code)]


# An inpainting GAN: a norm-layer factory that picks its layer by a string (`norm_type.lower() ==
# 'batch'`), blocks that pass their own `norm` parameter on, and networks that pass theirs; every
# default is 'instance'. A weight-init helper tests class names by string.
INIT = """\
    import torch.nn as nn


    def weights_init(init_type="gaussian", gain=0.02):
        def init_func(m):
            classname = m.__class__.__name__
            if hasattr(m, "weight") and classname.find("Conv") != -1:
                nn.init.xavier_normal_(m.weight.data, gain=gain)
            elif classname.find('BatchNorm2d') != -1:
                nn.init.normal_(m.weight.data, 1.0, gain)
                nn.init.constant_(m.bias.data, 0.0)
        return init_func
"""

GENERATOR = """\
    import torch.nn as nn
    from models.weights_init import weights_init


    def get_norm_layer(channels, norm_type="instance"):
        \"\"\"norm_type -- batch | instance | none\"\"\"
        if norm_type == None:
            norm_layer = nn.Sequential()
        elif norm_type.lower() == "batch":
            norm_layer = nn.BatchNorm2d(channels, affine=True, track_running_stats=True)
        elif norm_type.lower() == "instance":
            norm_layer = nn.InstanceNorm2d(channels, affine=True)
        else:
            raise NotImplementedError(norm_type)
        return norm_layer


    class ConvNormActiv(nn.Module):
        def __init__(self, in_channels, out_channels, norm="{default}"):
            \"\"\"(conv => norm => activ)\"\"\"
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
            self.norm = get_norm_layer(out_channels, norm)

        def forward(self, x):
            return self.norm(self.conv(x)).relu()


    class Generator(nn.Module):
        def __init__(self, base_channels=64, norm_type="instance"):
            super().__init__()
            self.enc = ConvNormActiv(4, base_channels, norm=norm_type)
            self.dec = ConvNormActiv(base_channels, 3, norm=norm_type)
            self.apply(weights_init(init_type="xavier"))

        def forward(self, x):
            return self.dec(self.enc(x))


    class PatchGAN(nn.Module):
        def __init__(self, in_channels=4, norm_type="instance"):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, 64, 5, stride=2, padding=2)
            self.norm = get_norm_layer(channels=64, norm_type=norm_type)
            self.apply(weights_init(init_type="xavier"))

        def forward(self, x):
            return self.norm(self.conv(x))
"""

GAN_TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from models.generator import Generator, PatchGAN


    def main(local_rank):
        dist.init_process_group(backend="nccl")
        generator = Generator(base_channels=64, norm_type="instance").to(local_rank)
        discriminator = PatchGAN(in_channels=4, norm_type="instance").to(local_rank)
        generator = DDP(generator, device_ids=[local_rank])
        discriminator = DDP(discriminator, device_ids=[local_rank])
        dist.destroy_process_group()
"""


def gan_project(default: str) -> dict[str, str]:
    return {"models/__init__.py": "", "models/weights_init.py": INIT,
            "models/generator.py": GENERATOR.replace("{default}", default), "train.py": GAN_TRAIN}


def test_ddp012_norm_chosen_by_string_every_call_leaves_instance(tmp_path: Path) -> None:
    # Every call gives the factory 'instance' (its own parameter's default, passed on): no
    # BatchNorm is built, and the weight-init test of class names builds none either.
    assert lines(tmp_path, gan_project("instance"), "DDP012") == []


def test_ddp012_norm_chosen_by_string_a_block_defaults_to_batch(tmp_path: Path) -> None:
    # The block's own default is 'batch': the generator builds BatchNorm; the discriminator,
    # whose every call gives 'instance', does not.
    assert lines(tmp_path, gan_project("batch"), "DDP012") == [("train.py", 11)]


# A workshop demo: the timm network's name comes from a YAML config the analysis cannot read.
# Unknown is not a finding: a replaced `fc` head suggests a ResNet but does not say which
# (`resnet50_gn` has no BatchNorm).
TIMM_TRAIN = """\
    import timm
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(local_rank, params):
        model_name = params["model_name"]
        model = timm.create_model(model_name, pretrained=False)
        model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        model.{head} = torch.nn.Linear(model.{head}.in_features, 14)
        model.to(f"cuda:{{local_rank}}")
        model = DDP(model, device_ids=[local_rank])
        return model
"""


def test_ddp012_timm_network_by_a_name_it_cannot_read_is_unknown(tmp_path: Path) -> None:
    for head in ("fc", "head"):
        assert lines(tmp_path / head, {"train.py": TIMM_TRAIN.format(head=head)}, "DDP012") == []


# A layout generator: a DDP subclass whose `__getattr__` hands what it lacks to the inner module,
# so `models["gen"].train_loss(...)` runs the inner module's method, outside DDP's forward.
WRAPPER = """\
    import torch


    class DDPWrapper(torch.nn.parallel.DistributedDataParallel):
        \"\"\"Very shallow wrapper to access attributes of a model\"\"\"

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self.module, name)
"""

GEN_MODEL = """\
    import torch.nn as nn


    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 8)

        def forward(self, inputs):
            return self.net(inputs)

        def train_loss(self, inputs, targets):
            outputs = self(inputs)
            return outputs, {"l1": (outputs - targets).abs().mean()}
"""

GEN_TRAIN = """\
    import torch
    from helpers.distributed import DDPWrapper
    from models.generator import Generator


    def train(rank, cfg, loader):
        models = {}
        models["gen"] = Generator()
        if cfg.use_ddp:
            models["gen"] = DDPWrapper(models["gen"].to(rank), device_ids=[rank])
        else:
            models["gen"] = models["gen"].to(rank)
        optimizer = torch.optim.Adam(models["gen"].parameters())
        for epoch in range(cfg.epochs):
            for inputs, targets in loader:
                models["gen"].zero_grad()
                {step}
                loss = sum(losses.values())
                loss.backward()
                optimizer.step()
"""


def gen_project(step: str) -> dict[str, str]:
    return {"helpers/__init__.py": "", "helpers/distributed.py": WRAPPER, "models/__init__.py": "",
            "models/generator.py": GEN_MODEL, "train.py": GEN_TRAIN.replace("{step}", step)}


def test_ddp013_method_read_through_wrapper_getattr(tmp_path: Path) -> None:
    files = gen_project('outputs, losses = models["gen"].train_loss(inputs, targets)')
    assert lines(tmp_path, files, "DDP013") == [("train.py", 17)]


def test_ddp013_forward_through_wrapper_with_getattr(tmp_path: Path) -> None:
    files = gen_project('outputs = models["gen"](inputs); losses = {"l1": (outputs - targets).abs().mean()}')
    assert lines(tmp_path, files, "DDP013") == []


# The same, the models handed to an epoch function in their dict (`train(models=models, ...)`).
GEN_TRAIN_EPOCH = """\
    import torch
    from helpers.distributed import DDPWrapper
    from models.generator import Generator


    def main_worker(rank, cfg, loader):
        models = {}
        models["gen"] = Generator()
        if cfg.use_ddp:
            models["gen"] = DDPWrapper(models["gen"].to(rank), device_ids=[rank])
        else:
            models["gen"] = models["gen"].to(rank)
        optimizers = {"gen": torch.optim.Adam(models["gen"].parameters())}
        for epoch in range(cfg.epochs):
            train(models=models, loader=loader, optimizers=optimizers)


    def train(models, loader, optimizers):
        for key in models:
            models[key].train()
        for inputs, targets in loader:
            models["gen"].zero_grad()
            {step}
            loss = sum(losses.values())
            loss.backward()
            optimizers["gen"].step()
"""


def test_ddp013_method_read_through_wrapper_getattr_in_epoch_function(tmp_path: Path) -> None:
    files = gen_project("")
    files["train.py"] = GEN_TRAIN_EPOCH.replace("{step}", 'outputs, losses = models["gen"].train_loss(inputs, targets)')
    assert lines(tmp_path, files, "DDP013") == [("train.py", 23)]


def test_ddp013_forward_through_wrapper_with_getattr_in_epoch_function(tmp_path: Path) -> None:
    files = gen_project("")
    files["train.py"] = GEN_TRAIN_EPOCH.replace(
        "{step}", 'outputs = models["gen"](inputs); losses = {"l1": (outputs - targets).abs().mean()}')
    assert lines(tmp_path, files, "DDP013") == []


# Self-supervised pre-training: a kNN evaluator exists on local rank 0 only (None elsewhere), and
# the epoch loop runs it on the DDP-wrapped network when it exists, tested with `&`.
KNN = """\
    import torch
    import torch.nn.functional as F


    class KNNEvaluator(object):
        def __init__(self, num_neighbors, num_classes):
            self.num_neighbors = num_neighbors
            self.num_classes = num_classes

        @torch.no_grad()
        def evaluate(self, net, memory_loader, test_loader):
            net.eval()
            feats = [F.normalize(net(batch["x"]), dim=1) for batch in memory_loader]
            return {"knn@5": float(len(feats))}
"""

BYOL = """\
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    from utils.knn import KNNEvaluator


    class BYOL(object):
        def __init__(self, backbone, local_rank, distributed):
            self.local_rank = local_rank
            self.online_net = backbone
            if distributed:
                self.online_net = DistributedDataParallel(
                    module=nn.SyncBatchNorm.convert_sync_batchnorm(self.online_net).to(local_rank),
                    device_ids=[local_rank])

        def train(self, data_loader):
            for batch in data_loader:
                loss = self.online_net(batch["x"]).mean()
                loss.backward()
            return {}

        def run(self, data_loader, finetune_set, test_set, epochs, eval_every):
            if self.local_rank == 0:
                finetune_loader = torch.utils.data.DataLoader(finetune_set)
                test_loader = torch.utils.data.DataLoader(test_set)
                knn_evaluator = KNNEvaluator(num_neighbors=[5, 200], num_classes=10)
            else:
                finetune_loader = None
                test_loader = None
                knn_evaluator = None
            for epoch in range(1, epochs + 1):
                history = self.train(data_loader)
                if (knn_evaluator is not None) & (epoch % eval_every == 0):
                    knn_scores = knn_evaluator.evaluate({net}, finetune_loader, test_loader)
"""


def test_ddp009_evaluator_built_on_rank_zero_only_runs_ddp_forward(tmp_path: Path) -> None:
    files = {"utils/__init__.py": "", "utils/knn.py": KNN, "run.py": BYOL.replace("{net}", "self.online_net")}
    assert lines(tmp_path, files, "DDP009", "run.py") == [("run.py", 34)]


def test_ddp009_evaluator_built_on_rank_zero_only_runs_inner_module(tmp_path: Path) -> None:
    files = {"utils/__init__.py": "", "utils/knn.py": KNN, "run.py": BYOL.replace("{net}", "self.online_net.module")}
    assert lines(tmp_path, files, "DDP009", "run.py") == []


def test_ddp009_evaluator_built_on_every_rank(tmp_path: Path) -> None:
    # Built on every rank (the test asks about the configuration): every rank evaluates.
    run = BYOL.replace("{net}", "self.online_net").replace("if self.local_rank == 0:", "if eval_every > 0:")
    files = {"utils/__init__.py": "", "utils/knn.py": KNN, "run.py": run}
    assert lines(tmp_path, files, "DDP009", "run.py") == []
