"""A torchvision network picked by `eval` of a name the command line gives (`eval("torchvision.models."
+ args.model)(pretrained=True)`), through `ddpcheck lint --select DDP012`: reported when the
option's default names a BatchNorm network, clean when it names one without BatchNorm."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torchvision


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = eval("torchvision.models." + args.model)(pretrained=True)
        model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--model", default="resnet18")
        main(parser.parse_args())
"""


def test_a_batchnorm_network_named_by_the_default_option_is_reported(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, {"train.py": TRAIN}, "train.py", select="DDP012"), "DDP012") == [14]
    formatted = TRAIN.replace('eval("torchvision.models." + args.model)', 'eval(f"torchvision.models.{args.model}")')
    assert _lines(lint_project(tmp_path, {"train.py": formatted}, "train.py", select="DDP012"), "DDP012") == [14]


def test_a_network_without_batchnorm_or_an_unknown_name_is_clean(tmp_path: Path) -> None:
    vit = TRAIN.replace('default="resnet18"', 'default="vit_b_16"')
    assert _lines(lint_project(tmp_path, {"train.py": vit}, "train.py", select="DDP012"), "DDP012") == []
    unknown = TRAIN.replace('eval("torchvision.models." + args.model)', 'eval("torchvision.models." + os.environ["ARCH"])')
    assert _lines(lint_project(tmp_path, {"train.py": unknown}, "train.py", select="DDP012"), "DDP012") == []
