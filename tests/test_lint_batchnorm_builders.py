"""BatchNorm without SyncBatchNorm (DDP012) where the network comes from a builder chosen by name
with `eval("package." + name + ".builder")`, and where a module's `BatchNorm2d` is another
(synchronised) layer, through `ddpcheck lint`. Unknown builders stay silent."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist

    import nets
    from config import cfg


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--cfg", required=True)
        args = parser.parse_args()
        cfg.merge_from_file(args.cfg)
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = eval("nets." + cfg.MODEL.NAME + ".get_net")(cfg, is_train=True)
        model = model.cuda(){convert}
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

KEYPOINT_NET = """\
    import torch.nn as nn


    class KeypointNet(nn.Module):
        def __init__(self, joints):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
            self.head = nn.Conv2d(64, joints, 1)

        def forward(self, x):
            return self.head(self.stem(x))


    def get_net(cfg, is_train, **kwargs):
        return KeypointNet(cfg.MODEL.NUM_JOINTS)
    """

# A second module with a builder of the same name that this call cannot bind (it needs `channels`).
SCORE_NET = """\
    import torch.nn as nn


    def get_net(cfg, channels, is_train, **kwargs):
        return nn.Sequential(nn.Linear(channels, 64), nn.ReLU(), nn.Linear(64, 1))
    """

# One that it can: the name may pick a network without BatchNorm.
PLAIN_NET = """\
    import torch.nn as nn


    def get_net(cfg, is_train=False):
        return nn.Sequential(nn.Conv2d(3, 16, 3), nn.GELU(), nn.Conv2d(16, cfg.MODEL.NUM_JOINTS, 1))
    """

PACKAGE = {"nets/__init__.py": "import nets.keypoint_net\nimport nets.score_net\n",
           "config.py": "from yacs.config import CfgNode\n\ncfg = CfgNode()\n"}


def _lint(tmp_path, second: str, convert: str = "") -> set[tuple[str, int, str]]:
    write_project(tmp_path, {**PACKAGE, "train.py": TRAIN.format(convert=convert),
                             "nets/keypoint_net.py": KEYPOINT_NET, "nets/score_net.py": second})
    return finding_set(tmp_path, "train.py", select="DDP012")


def test_a_network_built_by_an_evaluated_builder_name_with_batchnorm_is_reported(tmp_path):
    assert _lint(tmp_path, SCORE_NET) == {("train.py", 21, "DDP012")}


def test_a_builder_name_that_may_pick_a_network_without_batchnorm_stays_silent(tmp_path):
    assert _lint(tmp_path, PLAIN_NET) == set()


def test_an_evaluated_builder_converted_to_syncbatchnorm_is_clean(tmp_path):
    convert = "\n        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)"
    assert _lint(tmp_path, SCORE_NET, convert) == set()


SEGMENTER = """\
    import torch.nn as nn

    {norm_import}


    class Segmenter(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.encoder = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), BatchNorm2d(64), nn.ReLU())
            self.classifier = nn.Conv2d(64, classes, 1)

        def forward(self, x):
            return self.classifier(self.encoder(x))
    """

SEG_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist

    from segmenter import Segmenter

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    net = Segmenter(19).cuda()
    net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local_rank])
    """


def test_a_module_whose_batchnorm_name_is_a_synchronised_layer_is_clean(tmp_path):
    write_project(tmp_path, {"segmenter.py": SEGMENTER.format(norm_import="from layers import InPlaceABNSync as BatchNorm2d"),
                             "layers.py": "import torch.nn as nn\n\n\nclass InPlaceABNSync(nn.Module):\n    pass\n",
                             "train.py": SEG_TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP012") == set()


def test_a_module_using_torchs_batchnorm_by_its_name_is_reported(tmp_path):
    write_project(tmp_path, {"segmenter.py": SEGMENTER.format(norm_import="from torch.nn import BatchNorm2d"),
                             "train.py": SEG_TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 12, "DDP012")}


# A layer helper in another module of the project whose BatchNorm sits behind a switch; the
# network imports the helper by name, and a base class's weight init names BatchNorm too.
LAYERS = """\
    import torch


    def dense_block(in_dim, out_dim, act=torch.nn.ReLU(), use_bn=False):
        layers = [torch.nn.Linear(in_dim, out_dim)]
        if use_bn == True:
            layers.append(torch.nn.BatchNorm1d(out_dim))
        if act is not None:
            layers.append(act)
        return layers


    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm2d(8)
    """

FIELD_BASE = """\
    from torch import nn


    class FieldBase(nn.Module):
        def init_weights(self):
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                elif isinstance(m, nn.BatchNorm1d):
                    nn.init.ones_(m.weight)
    """

FIELD = """\
    from torch import nn

    from field_base import FieldBase
    from layers import dense_block as block


    class RadianceField(FieldBase):
        def __init__(self, width=256):
            super().__init__()
            self.trunk = nn.Sequential(*block(60, width), *block(width, width{switch}))
            self.head = nn.Sequential(*block(width, 4, None))
            self.init_weights()

        def forward(self, x):
            return self.head(self.trunk(x))
    """

FIELD_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch import nn

    from field import RadianceField


    def worker(gpu, world_size):
        dist.init_process_group("nccl", rank=gpu, world_size=world_size)
        torch.cuda.set_device(gpu)
        net = RadianceField().cuda(gpu)
        net = nn.parallel.DistributedDataParallel(net, device_ids=[gpu])
        dist.destroy_process_group()
    """


def _lint_field(tmp_path, switch: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"layers.py": LAYERS, "field_base.py": FIELD_BASE,
                             "field.py": FIELD.format(switch=switch), "train.py": FIELD_TRAIN})
    return finding_set(tmp_path, "train.py", select="DDP012")


def test_an_imported_layer_helper_whose_batchnorm_switch_every_call_leaves_off_is_clean(tmp_path):
    # The helper module's other network builds BatchNorm, and the base class's weight init
    # tests for it: neither is part of this network.
    assert _lint_field(tmp_path, "") == set()
    assert _lint_field(tmp_path, ", use_bn=False") == set()


def test_an_imported_layer_helper_called_with_its_batchnorm_switch_on_is_reported(tmp_path):
    assert _lint_field(tmp_path, ", use_bn=True") == {("train.py", 14, "DDP012")}
    assert _lint_field(tmp_path, ", nn.ReLU(), True") == {("train.py", 14, "DDP012")}


def test_an_imported_layer_helper_given_a_switch_it_cannot_read_is_reported(tmp_path):
    # A value only the run knows may turn BatchNorm on: the helper's BatchNorm counts.
    assert _lint_field(tmp_path, ", use_bn=width > 128") == {("train.py", 14, "DDP012")}


NETS = """\
    from torch import nn


    class ConvNet(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU())

        def forward(self, x):
            return self.body(x)


    class VolumeNet(ConvNet):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.head = nn.Conv3d(32, 17, 1)


    class TokenNet(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(48, 64), nn.LayerNorm(64))

        def forward(self, x):
            return self.body(x)
    """

REGISTRY_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from nets import ConvNet, TokenNet, VolumeNet


    def main(config):
        dist.init_process_group("nccl")
        device = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(device)
        model = TABLE[config.model.name](config).to(device)
        model = DistributedDataParallel(model, device_ids=[device])
        return model
    """


def _lint_registry(tmp_path, table: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"nets.py": NETS, "train.py": REGISTRY_TRAIN.replace("TABLE", table)})
    return finding_set(tmp_path, "train.py", select="DDP012")


def test_a_network_picked_from_a_table_of_batchnorm_classes_is_reported(tmp_path):
    assert _lint_registry(tmp_path, '{"conv": ConvNet, "vol": VolumeNet}') == {("train.py", 15, "DDP012")}


def test_a_network_picked_from_a_table_that_holds_a_class_without_batchnorm_stays_silent(tmp_path):
    assert _lint_registry(tmp_path, '{"conv": ConvNet, "tokens": TokenNet}') == set()
    assert _lint_registry(tmp_path, '{"conv": ConvNet, "other": make_other}') == set()


TWO_MODELS = """\
    import os

    import torch
    import torch.distributed as dist
    from torch import nn

    from nets import ConvNet, TokenNet


    def main(cfg):
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        teacher = ConvNet(cfg).cuda()
        student = SECOND(cfg).cuda()
        if cfg.distributed:
            teacher = nn.parallel.DistributedDataParallel(teacher, device_ids=[rank])
            student = nn.parallel.DistributedDataParallel(student, device_ids=[rank])
        else:
            teacher = nn.parallel.DistributedDataParallel(teacher)
        return teacher, student
    """


def test_each_model_with_batchnorm_is_reported_once(tmp_path):
    # The teacher wrapped in two branches is one model; the student is another.
    write_project(tmp_path, {"nets.py": NETS, "train.py": TWO_MODELS.replace("SECOND", "ConvNet")})
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 17, "DDP012"), ("train.py", 18, "DDP012")}
    # A student without BatchNorm beside the teacher that has it.
    write_project(tmp_path, {"nets.py": NETS, "train.py": TWO_MODELS.replace("SECOND", "TokenNet")})
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 17, "DDP012")}


BUILDER = """\
    from nets import ConvNet, TokenNet, VolumeNet

    MODELS = {
        "conv": ConvNet,
        "volume": VolumeNet,
        EXTRA
    }


    def build_model(opts):
        name = opts.pop("name", None)
        if name not in MODELS:
            raise ValueError(name)
        factory = MODELS[name]
        return factory(**opts)
    """

BUILDER_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from builder import build_model


    def train(opts):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = build_model(opts.model).to(local_rank)
        model = DDP(model, device_ids=[local_rank], output_device=local_rank)
        return model
    """


def test_a_builder_that_picks_the_class_from_a_module_table_is_followed(tmp_path):
    write_project(tmp_path, {"nets.py": NETS, "builder.py": BUILDER.replace("EXTRA", ""), "train.py": BUILDER_TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 15, "DDP012")}
    write_project(tmp_path, {"nets.py": NETS, "builder.py": BUILDER.replace("EXTRA", '"tokens": TokenNet,'),
                             "train.py": BUILDER_TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP012") == set()


VGG_LIKE = """\
    import torch.nn as nn


    def make_layers(cfg, batch_norm=False):
        layers = []
        in_channels = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            elif v == "C":
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            else:
                conv = nn.Conv2d(in_channels, v, 3, padding=1)
                if batch_norm:
                    layers += [conv, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                else:
                    layers += [conv, nn.ReLU(inplace=True)]
                in_channels = v
        return layers


    class Backbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.ModuleList(make_layers([64, "M", 128, "C", 256]{switch}))
    """

VGG_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist

    from backbone import Backbone

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    net = torch.nn.parallel.DistributedDataParallel(Backbone().cuda(), device_ids=[local_rank])
    """


def test_a_batchnorm_switch_inside_an_elif_chains_else_is_read(tmp_path):
    write_project(tmp_path, {"backbone.py": VGG_LIKE.format(switch=""), "train.py": VGG_TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP012") == set()
    write_project(tmp_path, {"backbone.py": VGG_LIKE.format(switch=", batch_norm=True"), "train.py": VGG_TRAIN})
    assert finding_set(tmp_path, "train.py", select="DDP012") == {("train.py", 11, "DDP012")}


# --- a MoCo-style wrapper handed a project backbone builder, uncalled -------------------------

MOCO_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    import moco.builder
    from moco.resnet import resnet50


    def main_worker(gpu, ngpus):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=ngpus)
        torch.cuda.set_device(gpu)
        base_encoder = resnet50
        model = moco.builder.MoCo(base_encoder, 128, 65536)
        model = torch.nn.parallel.DistributedDataParallel(model.cuda(gpu), device_ids=[gpu])
        return model


    if __name__ == "__main__":
        mp.spawn(main_worker, nprocs=torch.cuda.device_count(), args=(torch.cuda.device_count(),))
    """

MOCO_BUILDER = """\
    import torch.nn as nn


    class MoCo(nn.Module):
        def __init__(self, base_encoder, dim=128, K=65536):
            super().__init__()
            self.encoder_q = base_encoder(num_classes=dim)
            self.encoder_k = base_encoder(num_classes=dim)
    """

MOCO_RESNET = """\
    import torch.nn as nn


    class ResNet(nn.Module):
        def __init__(self, layers, num_classes=1000, norm_layer=None):
            super().__init__()
            if norm_layer is None:
                norm_layer = NORM
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = norm_layer(64)
            self.fc = nn.Linear(64, num_classes)


    def resnet50(**kwargs):
        return ResNet([3, 4, 6, 3], **kwargs)
    """


def _lint_moco(tmp_path, norm: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"main_moco.py": MOCO_TRAIN, "moco/__init__.py": "",
                             "moco/builder.py": MOCO_BUILDER, "moco/resnet.py": MOCO_RESNET.replace("NORM", norm)})
    return finding_set(tmp_path, "main_moco.py", select="DDP012")


def test_a_wrapper_built_from_a_project_backbone_with_batchnorm_is_reported(tmp_path):
    assert _lint_moco(tmp_path, "nn.BatchNorm2d") == {("main_moco.py", 14, "DDP012")}


def test_a_wrapper_built_from_a_project_backbone_without_batchnorm_is_clean(tmp_path):
    assert _lint_moco(tmp_path, "nn.GroupNorm") == set()
