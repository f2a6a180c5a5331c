"""Models on the way to the DDP wrap, on mechanisms seen on public scripts of batch 25: a project
function that swaps BatchNorm for GroupNorm before the wrap (DDP012). Each through `ddpcheck
lint` on a small project written in the style of the scripts, with the variants that must stay
as they were."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


NORM_UTILS = """\
    import torch
    import torch.nn as nn


    def to_group_norm(module, groups=32):
        out = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            out = nn.GroupNorm(groups, module.num_features, affine=module.affine)
        for name, child in module.named_children():
            out.add_module(name, to_group_norm(child, groups))
        return out


    def swap_norms(net):
        for name, child in net.named_children():
            if isinstance(child, nn.BatchNorm2d):
                setattr(net, name, nn.GroupNorm(8, child.num_features))
            else:
                swap_norms(child)


    def init_weights(net):
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
"""

NORM_SCRIPT = """\
    import os
    import torch
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
    from norms import to_group_norm, swap_norms, init_weights


    def main():
        torch.distributed.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torchvision.models.resnet18(num_classes=10)
        {convert}
        model = model.cuda(local_rank)
        model = DDP(model, device_ids=[local_rank])
        return model


    if __name__ == "__main__":
        main()
"""


def _norm_project(convert: str) -> dict[str, str]:
    return {"norms.py": NORM_UTILS, "train.py": NORM_SCRIPT.format(convert=convert)}


def test_batchnorm_swapped_for_groupnorm_by_a_project_function_is_not_reported(tmp_path: Path) -> None:
    files = _norm_project("model = to_group_norm(model, groups=32)")
    assert lines(tmp_path, files, "DDP012") == []


def test_batchnorm_swapped_in_place_by_a_project_function_is_not_reported(tmp_path: Path) -> None:
    files = _norm_project("swap_norms(model)")
    assert lines(tmp_path, files, "DDP012") == []


def test_a_weight_init_that_only_tests_for_batchnorm_swaps_nothing(tmp_path: Path) -> None:
    files = _norm_project("init_weights(model)")
    assert lines(tmp_path, files, "DDP012") == [("train.py", 15)]


def test_batchnorm_kept_is_reported(tmp_path: Path) -> None:
    files = _norm_project("pass")
    assert lines(tmp_path, files, "DDP012") == [("train.py", 15)]
