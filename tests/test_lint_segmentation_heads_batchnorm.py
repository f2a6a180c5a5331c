"""Hugging Face segmentation networks whose heads fuse features through a BatchNorm2d
(SegFormer's and UperNet's `...ForSemanticSegmentation`) wrapped in DDP without SyncBatchNorm
(DDP012), through `ddpcheck lint` on a small segmentation script; SegFormer's encoder alone
(`SegformerModel`, LayerNorm only) and a converted model stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import {network}


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        model = {network}.from_pretrained("nvidia/mit-b2", num_labels=3, ignore_mismatched_sizes=True)
        model = model.to(device)
        {convert}
        model = DDP(model, device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-5)
        for step in range(100):
            out = model(pixel_values=torch.randn(2, 3, 512, 512, device=device))
            out.logits.mean().backward()
            optimizer.step()
            optimizer.zero_grad()


    if __name__ == "__main__":
        main()
"""


def _script(network: str, convert: str = "pass") -> dict[str, str]:
    return {"train.py": SCRIPT.replace("{network}", network).replace("{convert}", convert)}


def test_segformer_for_segmentation_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _script("SegformerForSemanticSegmentation"), "DDP012") == [("train.py", 15)]


def test_upernet_for_segmentation_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _script("UperNetForSemanticSegmentation"), "DDP012") == [("train.py", 15)]


def test_segformer_encoder_alone_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _script("SegformerModel"), "DDP012") == []


def test_converted_segformer_is_clean(tmp_path: Path) -> None:
    files = _script("SegformerForSemanticSegmentation", "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)")
    assert lines(tmp_path, files, "DDP012") == []
