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
