"""The wrapped network and the training step as projects write them, through `ddpcheck lint`:
one config factory that builds the model and the optimizer, a wrapper stored under another
attribute than the one the training step calls."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

CONFIG = """\
    class Config(dict):
        def build(self, key, namespace, *args, **kwargs):
            spec = self[key]
            options = dict(spec.get("args", {}))
            options.update(kwargs)
            return getattr(namespace, spec["type"])(*args, **options)
    """

TRAINER = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, optimizer, loader, local_rank):
            self.device = torch.device("cuda", local_rank)
            self.model = model.to(self.device)
            self.optimizer = optimizer
            self.ddp_model = DDP(self.model, device_ids=[local_rank])
            self.loader = loader

        def train_epoch(self, epoch):
            self.ddp_model.train()
            for images, labels in self.loader:
                logits = self.ddp_model(images.to(self.device))
                loss = torch.nn.functional.cross_entropy(logits, labels.to(self.device))
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
    """

TRAIN = """\
    import json
    import os

    import torch
    import torch.distributed as dist

    import networks
    from config import Config
    from trainer import Trainer


    def run(config: Config, local_rank: int):
        net = config.build("arch", networks)
        optimizer = config.build("optimizer", torch.optim, net.parameters())
        loader = config.build("loader", torch.utils.data, config.build("dataset", networks))
        trainer = Trainer(net, optimizer, loader, local_rank)
        for epoch in range(config["epochs"]):
            trainer.train_epoch(epoch)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        with open("config.json") as f:
            run(Config(json.load(f)), local_rank)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

NETWORKS = """\
    import torch
    from torch import nn


    class Classifier(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.fc = nn.Linear(32, classes)

        def forward(self, x):
            return self.fc(x)


    class Points(torch.utils.data.Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            return torch.randn(32), i % 10
    """


def _factory_project(tmp_path, trainer: str = TRAINER) -> None:
    _write(tmp_path, {"train.py": TRAIN, "trainer.py": trainer, "config.py": CONFIG, "networks.py": NETWORKS})


def test_an_optimizer_from_the_factory_that_built_the_model_is_not_the_model(tmp_path):
    # One factory's return expression makes the network and the optimizer: stepping the optimizer
    # runs no module.
    _factory_project(tmp_path)
    assert _findings(tmp_path, "train.py", "trainer.py", select="DDP013") == set()


def test_the_plain_model_from_the_factory_trained_beside_its_wrapper_is_reported(tmp_path):
    _factory_project(tmp_path, TRAINER.replace("logits = self.ddp_model(", "logits = self.model("))
    assert _findings(tmp_path, "train.py", "trainer.py", select="DDP013") == {("trainer.py", 16, "DDP013")}


CONTRASTIVE_BUILDER = """\
    from torch import nn
    import torch.nn.functional as F


    class Contrastive(nn.Module):
        def __init__(self, backbone, dim=128):
            super().__init__()
            self.encoder = backbone(num_classes=dim)

        def forward(self, x):
            return F.normalize(self.encoder(x), dim=1)
    """

CONTRASTIVE_TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torchvision.models as models

    from contrastive import Contrastive

    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet50", choices=sorted(models.__dict__))
    parser.add_argument("--sync-bn", action="store_true", help="use synchronized batch norm")
    parser.add_argument("--lr", type=float, default=0.3)


    def main():
        args = parser.parse_args()
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = Contrastive(models.__dict__[args.arch], dim=128).cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _contrastive(tmp_path, train: str = CONTRASTIVE_TRAIN):
    _write(tmp_path, {"train.py": train, "contrastive.py": CONTRASTIVE_BUILDER})
    return _findings(tmp_path, "train.py", select="DDP012")


def test_a_network_built_from_the_constructor_it_is_given_has_that_constructors_batchnorm(tmp_path):
    # The sync-BN flag is declared and never read: it converts nothing.
    assert _contrastive(tmp_path) == {("train.py", 22, "DDP012")}


def test_a_sync_bn_flag_that_is_read_is_an_offered_conversion(tmp_path):
    train = CONTRASTIVE_TRAIN.replace(
        '        model = torch.nn.parallel.DistributedDataParallel(',
        '        if args.sync_bn:\n'
        '            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n'
        '        model = torch.nn.parallel.DistributedDataParallel(')
    assert _contrastive(tmp_path, train) == set()


def test_a_given_constructor_without_batchnorm_stays_quiet(tmp_path):
    assert _contrastive(tmp_path, CONTRASTIVE_TRAIN.replace('default="resnet50"', 'default="vit_b_16"')) == set()


def test_a_constructor_given_but_never_called_by_the_network_is_not_its_layers(tmp_path):
    _write(tmp_path, {"train.py": CONTRASTIVE_TRAIN, "contrastive.py": CONTRASTIVE_BUILDER.replace(
        "self.encoder = backbone(num_classes=dim)", "self.encoder = nn.Linear(dim, dim)\n        self.kind = backbone")})
    assert _findings(tmp_path, "train.py", select="DDP012") == set()


GRAPH_UTILS = """\
    import torch
    import torch.distributed as dist


    def is_distributed_model(model):
        return isinstance(model, torch.nn.parallel.DistributedDataParallel)


    def unwrap(model):
        if is_distributed_model(model):
            return model.module
        else:
            return model


    def wrap(model, device):
        if dist.is_initialized():
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device])
        return model
    """

GRAPH_LOOP = """\
    from graphutils import unwrap


    def train_one_epoch(loader, model, optimizer):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            pred = model(batch)
            loss = (pred - batch.y).pow(2).mean()
            loss.backward()
            optimizer.step()


    def fit(model, optimizer, loader, epochs):
        model = unwrap(model)
        print(f"heads: {model.num_heads}")
        for epoch in range(epochs):
            train_one_epoch(loader, model, optimizer)
    """

GRAPH_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist

    from graphutils import wrap
    from loop import fit


    class Regressor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads = 1
            self.mlp = torch.nn.Linear(16, 1)

        def forward(self, batch):
            return self.mlp(batch.x)


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = wrap(Regressor().cuda(), local_rank)
        optimizer = torch.optim.AdamW(model.parameters(), lr=float(os.environ.get("LR", "1e-3")))
        fit(model, optimizer, [], 10)
        dist.destroy_process_group()
    """


def test_training_the_module_a_project_unwrap_helper_returns_is_reported(tmp_path):
    _write(tmp_path, {"train.py": GRAPH_TRAIN, "graphutils.py": GRAPH_UTILS, "loop.py": GRAPH_LOOP})
    assert _findings(tmp_path, "train.py", "loop.py", select="DDP013") == {("loop.py", 8, "DDP013")}


def test_an_unwrap_helper_used_only_for_reading_attributes_is_quiet(tmp_path):
    loop = GRAPH_LOOP.replace("model = unwrap(model)\n        print(f\"heads: {model.num_heads}\")",
                              "print(f\"heads: {unwrap(model).num_heads}\")")
    assert loop != GRAPH_LOOP
    _write(tmp_path, {"train.py": GRAPH_TRAIN, "graphutils.py": GRAPH_UTILS, "loop.py": loop})
    assert _findings(tmp_path, "train.py", "loop.py", select="DDP013") == set()


SPEECH_BLOCKS = """\
    from torch import nn


    class ConvModule(nn.Module):
        def __init__(self, dim, kernel=31):
            super().__init__()
            self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
            self.norm = nn.BatchNorm1d(dim)
            self.act = nn.SiLU()

        def forward(self, x):
            return self.act(self.norm(self.depthwise(x)))
    """

SPEECH_ENCODER = """\
    from torch import nn

    from speech.blocks import ConvModule


    class Encoder(nn.Module):
        def __init__(self, dim, layers):
            super().__init__()
            self.layers = nn.ModuleList([ConvModule(dim) for _ in range(layers)])

        def forward(self, x):
            for layer in self.layers:
                x = x + layer(x)
            return x
    """

SPEECH_MODEL = """\
    from torch import nn


    class Transducer(nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.vocab = vocab
            self.encoder = None
            self.head = None

        def forward(self, x):
            return self.head(self.encoder(x).transpose(1, 2))
    """

SPEECH_BUILDER = """\
    from torch import nn

    from speech.encoder import Encoder
    from speech.model import Transducer


    def build_model(vocab, dim=144, layers=4):
        model = Transducer(vocab)
        model.encoder = Encoder(dim, layers)
        model.head = nn.Linear(dim, vocab)
        return model
    """

SPEECH_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from speech.builder import build_model


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = build_model(vocab=500)
        model.to(rank)
        ddp_model = DDP(model, device_ids=[rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _speech(tmp_path, blocks: str = SPEECH_BLOCKS):
    _write(tmp_path, {"train.py": SPEECH_TRAIN, "speech/__init__.py": "", "speech/blocks.py": blocks,
                      "speech/encoder.py": SPEECH_ENCODER, "speech/model.py": SPEECH_MODEL,
                      "speech/builder.py": SPEECH_BUILDER})
    return _findings(tmp_path, "train.py", select="DDP012")


def test_an_encoder_attached_by_the_builder_brings_its_blocks_batchnorm(tmp_path):
    assert _speech(tmp_path) == {("train.py", 16, "DDP012")}


def test_an_attached_encoder_without_batchnorm_stays_quiet(tmp_path):
    assert _speech(tmp_path, SPEECH_BLOCKS.replace("nn.BatchNorm1d(dim)", "nn.GroupNorm(1, dim)")) == set()


PROTEIN_MODULES = """\
    import math

    import torch
    from torch import nn


    class SinusoidalPositions(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim
            self.register_buffer("_anchor", torch.zeros(1))

        def forward(self, tokens):
            steps = torch.arange(tokens.size(1), device=self._anchor.device)
            freqs = torch.exp(torch.arange(0, self.dim, 2, device=steps.device) * -(math.log(10000.0) / self.dim))
            angles = steps[:, None] * freqs[None]
            return torch.cat([angles.sin(), angles.cos()], dim=-1)
    """

PROTEIN_MODEL = """\
    from torch import nn

    from .modules import SinusoidalPositions


    class ProteinEncoder(nn.Module):
        def __init__(self, vocab, dim=64):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.positions = SinusoidalPositions(dim)
            self.head = nn.Linear(dim, vocab)

        def forward(self, tokens):
            return self.head(self.embed(tokens) + self.positions(tokens))
    """

PROTEIN_TRAINER = """\
    import torch


    class Trainer:
        def __init__(self, net, optimizer, loaders, rank, eval_every=100):
            self.net = net
            self.optimizer = optimizer
            self.loaders = loaders
            self.rank = rank
            self.eval_every = eval_every

        def evaluate(self):
            self.net.eval()
            total = 0.0
            with torch.no_grad():
                for tokens, labels in self.loaders["valid"]:
                    logits = self.net(tokens)
                    total += torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels).item()
            self.net.train()
            return total

        def run(self, epochs):
            step = 0
            for epoch in range(epochs):
                for tokens, labels in self.loaders["train"]:
                    loss = torch.nn.functional.cross_entropy(self.net(tokens).transpose(1, 2), labels)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    step += 1
                    if step % self.eval_every == 0:
                        if self.rank == 0:
                            print("valid loss", self.evaluate())
    """

PROTEIN_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from protein.model import ProteinEncoder
    from protein.trainer import Trainer


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = ProteinEncoder(vocab=33).cuda()
        model = DDP(model, device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=float(os.environ.get("LR", "1e-4")))
        Trainer(model, optimizer, {"train": [], "valid": []}, rank).run(10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _protein(tmp_path, modules: str = PROTEIN_MODULES):
    _write(tmp_path, {"train.py": PROTEIN_TRAIN, "protein/__init__.py": "", "protein/modules.py": modules,
                      "protein/model.py": PROTEIN_MODEL, "protein/trainer.py": PROTEIN_TRAINER})
    return _findings(tmp_path, "train.py", "protein/trainer.py", select="DDP009")


def test_a_rank_zero_evaluation_method_that_runs_the_wrapper_holding_buffers_is_reported(tmp_path):
    assert _protein(tmp_path) == {("trainer.py", 33, "DDP009")}


def test_a_rank_zero_evaluation_method_of_a_model_without_buffers_is_quiet(tmp_path):
    assert _protein(tmp_path, PROTEIN_MODULES.replace('self.register_buffer("_anchor", torch.zeros(1))',
                                                      'self.scale = 1.0').replace("self._anchor.device", "tokens.device")) == set()


GNN_BASE = """\
    import torch
    from torch_geometric.nn import BatchNorm, global_mean_pool


    class Stack(torch.nn.Module):
        def __init__(self, in_dim, hidden, layers):
            super().__init__()
            self.convs = torch.nn.ModuleList()
            self.norms = torch.nn.ModuleList()
            for i in range(layers):
                self.convs.append(self.make_conv(in_dim if i == 0 else hidden, hidden))
                self.norms.append(BatchNorm(hidden))
            self.head = torch.nn.Linear(hidden, 1)

        def forward(self, data):
            x = data.x
            for conv, norm in zip(self.convs, self.norms):
                x = torch.relu(norm(conv(x, data.edge_index)))
            return self.head(global_mean_pool(x, data.batch))
    """

GNN_MODELS = """\
    from torch_geometric.nn import GINConv
    from torch import nn

    from gnn.base import Stack


    class GINStack(Stack):
        def make_conv(self, in_dim, out_dim):
            return GINConv(nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim)))


    def create(in_dim, hidden=64, layers=3):
        return GINStack(in_dim, hidden, layers)
    """

GNN_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist

    from gnn.models import create

    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = create(11).cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        dist.destroy_process_group()
    """


def _gnn(tmp_path, base: str = GNN_BASE):
    _write(tmp_path, {"train.py": GNN_TRAIN, "gnn/__init__.py": "", "gnn/base.py": base, "gnn/models.py": GNN_MODELS})
    return _findings(tmp_path, "train.py", select="DDP012")


def test_pyg_batchnorm_in_the_project_base_class_of_a_graph_network_is_batchnorm(tmp_path):
    assert _gnn(tmp_path) == {("train.py", 13, "DDP012")}


def test_pyg_layernorm_in_the_base_class_stays_quiet(tmp_path):
    assert _gnn(tmp_path, GNN_BASE.replace("BatchNorm", "LayerNorm")) == set()


MM_BACKBONE = """\
    import copy

    from mmcv.cnn import build_conv_layer, build_norm_layer
    from torch import nn


    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, norm_cfg=dict(type="BN", requires_grad=True)):
            super().__init__()
            norm_cfg = copy.deepcopy(norm_cfg)
            self.conv = build_conv_layer(None, inplanes, planes, 3, padding=1, bias=False)
            self.norm_name, norm = build_norm_layer(norm_cfg, planes)
            self.add_module(self.norm_name, norm)

        def forward(self, x):
            return getattr(self, self.norm_name)(self.conv(x)).relu()


    class ResNet(nn.Module):
        def __init__(self, depth, norm_cfg=dict(type="BN", requires_grad=True)):
            super().__init__()
            self.norm_cfg = copy.deepcopy(norm_cfg)
            self.stem = build_conv_layer(None, 3, 64, 7, stride=2, padding=3, bias=False)
            self.stem_name, stem_norm = build_norm_layer(self.norm_cfg, 64)
            self.add_module(self.stem_name, stem_norm)
            self.layers = nn.Sequential(*[Bottleneck(64, 64, norm_cfg=self.norm_cfg) for _ in range(depth // 16)])

        def forward(self, x):
            return self.layers(getattr(self, self.stem_name)(self.stem(x)).relu())
    """

MM_DETECTOR = """\
    from torch import nn

    from nets.backbone import ResNet


    class Backbone(nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.body = ResNet(depth)

        def forward(self, x):
            return self.body(x)


    class Detector(nn.Module):
        def __init__(self, backbone, num_queries=100):
            super().__init__()
            self.backbone = backbone
            self.query = nn.Embedding(num_queries, 64)

        def forward(self, x):
            return self.backbone(x).flatten(2) @ self.query.weight.t()


    def build(args):
        backbone = Backbone(args.depth)
        return Detector(backbone), nn.MSELoss()
    """

MM_TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nets.detector import build

    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=50)

    if __name__ == "__main__":
        args = parser.parse_args()
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(gpu)
        model, criterion = build(args)
        model = DDP(model.cuda(), device_ids=[gpu])
        dist.destroy_process_group()
    """


def _mm(tmp_path, backbone: str = MM_BACKBONE):
    _write(tmp_path, {"train.py": MM_TRAIN, "nets/__init__.py": "", "nets/backbone.py": backbone,
                      "nets/detector.py": MM_DETECTOR})
    return _findings(tmp_path, "train.py", select="DDP012")


def test_mmcv_norm_layers_built_from_a_bn_config_are_batchnorm(tmp_path):
    assert _mm(tmp_path) == {("train.py", 19, "DDP012")}


def test_mmcv_norm_layers_built_from_a_group_norm_config_stay_quiet(tmp_path):
    assert _mm(tmp_path, MM_BACKBONE.replace('dict(type="BN", requires_grad=True)', 'dict(type="GN", num_groups=32)')) == set()


def test_mmcv_norm_layers_built_from_a_sync_bn_config_stay_quiet(tmp_path):
    assert _mm(tmp_path, MM_BACKBONE.replace('type="BN"', 'type="SyncBN"')) == set()


STACK_TRAIN = """\
    import contextlib
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def compute_loss(batch, encoder, head):
        feats = encoder(batch["x"])
        logits = head(feats)
        return torch.nn.functional.cross_entropy(logits, batch["y"])


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        encoder = DDP(torch.nn.Linear(16, 32).cuda(), device_ids=[rank])
        head = DDP(torch.nn.Linear(32, 4).cuda(), device_ids=[rank])
        optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()),
                                      lr=float(os.environ.get("LR", "1e-3")))
        accum = int(os.environ.get("ACCUM", "4"))
        for step, batch in enumerate([]):
            loss = compute_loss(batch, encoder=encoder, head=head)
            sync = (step + 1) % accum == 0
            with contextlib.ExitStack() as stack:
                if not sync:
                    stack.enter_context(encoder.no_sync())
                    stack.enter_context(head.no_sync())
                (loss / accum).backward()
            if sync:
                optimizer.step()
                optimizer.zero_grad()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_no_sync_entered_on_an_exit_stack_after_a_helper_ran_the_forward_is_reported(tmp_path):
    _write(tmp_path, {"train.py": STACK_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP030") == {("train.py", 27, "DDP030")}


def test_no_sync_entered_on_an_exit_stack_around_the_forward_is_quiet(tmp_path):
    train = STACK_TRAIN.replace(
        "            loss = compute_loss(batch, encoder=encoder, head=head)\n", "").replace(
        "                (loss / accum).backward()",
        "                loss = compute_loss(batch, encoder=encoder, head=head)\n"
        "                (loss / accum).backward()")
    assert train.count("loss = compute_loss(batch") == 1
    _write(tmp_path, {"train.py": train})
    assert _findings(tmp_path, "train.py", select="DDP030") == set()
