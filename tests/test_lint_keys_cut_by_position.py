"""An inference script that rebuilds the state dict with every key cut at a fixed position
(`weight[k[7:]] = v`) drops the DDP wrapper's `module.` prefix (DDP019): through `ddpcheck
lint` on a small project with a training script and an inference script beside it, with the
variant whose inference script loads the keys as saved still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from model import build_model


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        model = DDP(build_model().cuda(), device_ids=[rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for epoch in range(10):
            loss = model(torch.randn(8, 16).cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 0:
                torch.save(model.state_dict(), os.path.join("models", f"{epoch}_model.pt"))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

MODEL = """\
    import torch.nn as nn


    def build_model():
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
"""

INFERENCE = """\
    import os
    from collections import OrderedDict
    import torch
    from model import build_model

    model = build_model()
    tmp_weight = torch.load(os.path.join("models", "9_model.pt"))
    {body}
    model.load_state_dict(weight)
    model.eval()
"""

CUT = """weight = OrderedDict()
    for k, v in tmp_weight.items():
        weight[k[7:]] = v  # keys saved by the distributed run"""

CUT_BY_NAME = """weight = OrderedDict()
    for key, value in tmp_weight.items():
        name = key[7:]
        weight[name] = value"""

AS_SAVED = "weight = tmp_weight"


def _project(body: str) -> dict[str, str]:
    return {"train.py": TRAIN, "model.py": MODEL, "inference.py": INFERENCE.replace("{body}", body)}


def test_keys_cut_in_the_subscript_by_the_inference_script_are_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _project(CUT), "DDP019") == []


def test_keys_cut_into_a_name_by_the_inference_script_are_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _project(CUT_BY_NAME), "DDP019") == []


def test_inference_script_loading_the_keys_as_saved_is_still_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _project(AS_SAVED), "DDP019") == [("train.py", 20)]
