"""A network whose backbone builds `nn.SyncBatchNorm` layers itself while its decoder, in another
module, builds `nn.BatchNorm2d`, through `ddpcheck lint`: the decoder's layers are not synchronised,
so the wrap is reported; a decoder without BatchNorm, or a conversion of the whole network, is
clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


BACKBONE = """\
    import torch.nn as nn


    class Backbone(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.conv = nn.Conv2d(3, dim, 3)
            self.norm = nn.SyncBatchNorm(dim)

        def forward(self, x):
            return self.norm(self.conv(x))
"""

DECODER = """\
    import torch.nn as nn


    class ConvModule(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 3, padding=1)
            self.batch_norm = nn.BatchNorm2d(cout)

        def forward(self, x):
            return self.batch_norm(self.conv(x)).relu()


    class SegHead(nn.Module):
        def __init__(self, dim, classes):
            super().__init__()
            self.block = ConvModule(dim, dim)
            self.cls = nn.Conv2d(dim, classes, 1)

        def forward(self, x):
            return self.cls(self.block(x))
"""

NETWORK = """\
    import torch.nn as nn

    from .backbone import Backbone
    from .decoder import SegHead


    class SegModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = Backbone(64)
            self.head = SegHead(64, 6)

        def forward(self, x):
            return self.head(self.backbone(x))
"""

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from model.network import SegModel


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = SegModel().cuda()
        model = DDP(model, device_ids=[rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _project(decoder: str = DECODER, train: str = TRAIN) -> dict[str, str]:
    return {"model/__init__.py": "", "model/backbone.py": BACKBONE, "model/decoder.py": decoder,
            "model/network.py": NETWORK, "train.py": train}


def test_a_decoder_with_batchnorm_beside_a_synchronised_backbone_is_reported(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, _project(), "train.py", select="DDP012"), "DDP012") == [15]


def test_synchronised_or_converted_networks_are_clean(tmp_path: Path) -> None:
    layer_norm = DECODER.replace("nn.BatchNorm2d(cout)", "nn.GroupNorm(8, cout)")
    assert _lines(lint_project(tmp_path, _project(decoder=layer_norm), "train.py", select="DDP012"), "DDP012") == []
    converted = TRAIN.replace("        model = DDP(", "        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
                              "        model = DDP(").replace("import torch\n", "import torch\n    import torch.nn as nn\n")
    assert _lines(lint_project(tmp_path, _project(train=converted), "train.py", select="DDP012"), "DDP012") == []
