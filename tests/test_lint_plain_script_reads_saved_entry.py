"""A training script that resumes into its DDP model, beside an evaluation script that loads
the same checkpoint entry into a plain model (DDP019): the resume round-trips the `module.`
prefix, the evaluation script does not. Through `ddpcheck lint` on a small project, with the
variants where no plain script reads that entry staying silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from net import Segmenter


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = Segmenter().cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        start = 0
        if os.path.exists(os.path.join(args.save_path, "latest.pth")):
            checkpoint = torch.load(os.path.join(args.save_path, "latest.pth"), map_location="cpu")
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            start = checkpoint["epoch"] + 1
        for epoch in range(start, args.epochs):
            loss = model(torch.randn(2, 3, 64, 64).cuda()).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if dist.get_rank() == 0:
                checkpoint = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                }
                torch.save(checkpoint, os.path.join(args.save_path, "latest.pth"))
"""

NET = """\
    import torch.nn as nn


    class Segmenter(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            return self.conv(x)
"""

EVAL = """\
    import argparse
    import torch
    import torch.distributed as dist
    from net import Segmenter


    def score(model, batch):
        out = model(batch).mean()
        if dist.is_initialized():
            dist.all_reduce(out)
        return out


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--model-path", required=True)
        args = parser.parse_args()
        model = Segmenter().cuda()
        checkpoint = torch.load(args.model_path, map_location="cpu")
        model.load_state_dict(checkpoint[{entry}])
        print(score(model, torch.randn(1, 3, 64, 64).cuda()))


    if __name__ == "__main__":
        main()
"""


def _project(entry: str) -> dict[str, str]:
    return {"train.py": TRAIN, "net.py": NET, "evaluate.py": EVAL.replace("{entry}", entry)}


def test_plain_script_loading_the_saved_entry_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _project('"model"'), "DDP019") == [("train.py", 27)]


def test_plain_script_loading_another_entry_is_clean(tmp_path: Path) -> None:
    # Nothing outside the run reads the DDP state dict: the resume round-trips the prefix.
    assert lines(tmp_path, _project('"weights"'), "DDP019") == []


def test_wrapping_script_loading_the_saved_entry_is_clean(tmp_path: Path) -> None:
    # The evaluation script wraps its model too: its keys carry the same prefix.
    files = _project('"model"')
    files["evaluate.py"] = files["evaluate.py"].replace(
        "model = Segmenter().cuda()", "model = torch.nn.DataParallel(Segmenter().cuda())")
    assert lines(tmp_path, files, "DDP019") == []


def test_plain_trainer_that_saves_its_own_checkpoints_is_clean(tmp_path: Path) -> None:
    # A single-GPU twin that resumes from the `checkpoint["model"]` it saves itself.
    files = _project('"model"')
    files["evaluate.py"] = files["evaluate.py"].replace(
        "        print(score(model, torch.randn(1, 3, 64, 64).cuda()))\n",
        "        print(score(model, torch.randn(1, 3, 64, 64).cuda()))\n"
        "        torch.save({\"model\": model.state_dict()}, args.model_path)\n")
    assert lines(tmp_path, files, "DDP019") == []
