"""A `--local_rank` flag the script hands to `torch.cuda.set_device` itself, through `ddpcheck lint
--select DDP008`: a helper module that reads LOCAL_RANK for something else (downloading weights on
local rank 0 only) does not make the environment the device's source, so under torchrun every
rank would take the flag's default. A run whose helper sets the flag's entry from LOCAL_RANK
first stays clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP008") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


WEIGHTS = """\
    import os

    import torch
    import torch.distributed as dist


    def fetch_weights(url):
        rank = int(os.environ.get("LOCAL_RANK", 0))
        if rank == 0:
            path = torch.hub.download_url_to_file(url, "weights.pth")
        if dist.is_initialized():
            dist.barrier()
        return torch.load("weights.pth", map_location="cpu")


    def build_detector(cfg):
        net = torch.nn.Conv2d(3, 8, 3)
        net.load_state_dict(fetch_weights(cfg.url))
        return net
"""

TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from weights import build_detector


    def parse_args():
        parser = argparse.ArgumentParser()
        parser.add_argument("--url", default="https://example.org/w.pth")
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        if "LOCAL_RANK" not in os.environ:
            os.environ["LOCAL_RANK"] = str(args.local_rank)
        return args


    def main():
        args = parse_args()
        distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
        if distributed:
            torch.cuda.set_device(args.local_rank)
            dist.init_process_group("nccl", init_method="env://")
        net = build_detector(args).cuda()
        model = DistributedDataParallel(net, device_ids=[args.local_rank]) if distributed else net
        model(torch.randn(1, 3, 8, 8).cuda()).sum().backward()


    if __name__ == "__main__":
        main()
"""


def test_the_flag_handed_to_set_device_is_the_device_source(tmp_path: Path) -> None:
    files = {"train.py": TRAIN, "weights.py": WEIGHTS}
    assert _lines(lint_project(tmp_path, files, "train.py", "weights.py", select="DDP008")) == [("train.py", 14)]


def test_the_entry_set_from_local_rank_first_is_clean(tmp_path: Path) -> None:
    fixed = TRAIN.replace("        args = parse_args()\n",
                          "        args = parse_args()\n        args.local_rank = int(os.environ[\"LOCAL_RANK\"])\n")
    assert fixed != TRAIN
    files = {"train.py": fixed, "weights.py": WEIGHTS}
    assert _lines(lint_project(tmp_path, files, "train.py", "weights.py", select="DDP008")) == []
