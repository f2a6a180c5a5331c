"""One value made one way or another in the arms of one `if` chain (a checkpoint picked by a
setting, an optimizer picked by the model type) is reported once, through `ddpcheck lint`: where
the command line's defaults make it, else in the first arm. Values bound to different names, or
made one after the other, are still reported each."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


HORIZON_FINETUNE = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from config import cfg


    def build(model, local_rank):
        if cfg.HORIZON == 1:
            state = torch.load(cfg.WEIGHTS_1H, weights_only=True)
        elif cfg.HORIZON == 6:
            state = torch.load(cfg.WEIGHTS_6H, weights_only=True)
        elif cfg.HORIZON == 24:
            state = torch.load(cfg.WEIGHTS_24H, weights_only=True)
        else:
            raise ValueError(cfg.HORIZON)
        model.load_state_dict(state["model"])
        return DDP(model.cuda(local_rank), device_ids=[local_rank])


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--use_fsdp", action="store_true")
        parser.add_argument("--resume", type=str, default="")
        args = parser.parse_args()
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        net = build(torch.nn.Linear(4, 4), args.local_rank)
        if args.resume:
            if args.use_fsdp:
                ckpt = torch.load(args.resume + ".sharded")
            else:
                ckpt = torch.load(args.resume)
            net.module.load_state_dict(ckpt["model"])
        dist.destroy_process_group()
"""

CONFIG = """\
    class _Cfg:
        HORIZON = 6
        WEIGHTS_1H = "weights/h1.pth"
        WEIGHTS_6H = "weights/h6.pth"
        WEIGHTS_24H = "weights/h24.pth"


    cfg = _Cfg()
"""

TRAINER_CLASS = """\
    import torch


    class Restorer:
        def __init__(self, opts):
            self.opts = opts

        def restore(self, model):
            if self.opts.arch == "unet":
                self.state = torch.load(self.opts.unet_weights)
            else:
                self.state = torch.load(self.opts.vit_weights)
            model.load_state_dict(self.state)
"""

TRAINER_MAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from engine.restore import Restorer


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--arch", default="unet")
        parser.add_argument("--unet_weights", default="unet.pt")
        parser.add_argument("--vit_weights", default="vit.pt")
        opts = parser.parse_args()
        dist.init_process_group("nccl")
        model = torch.nn.Linear(2, 2).cuda()
        Restorer(opts).restore(model)
        model = DDP(model)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_one_checkpoint_picked_in_the_arms_of_one_chain_is_one_finding(tmp_path: Path) -> None:
    files = {"config.py": CONFIG, "finetune.py": HORIZON_FINETUNE}
    findings = lint_project(tmp_path, files, "finetune.py", select="DDP011")
    # The setting's chain: the first arm; the --use_fsdp chain: the arm the default takes.
    assert _lines(findings, "DDP011") == [12, 36]
    # In a method of a class in another module, bound to an attribute.
    files = {"engine/__init__.py": "", "engine/restore.py": TRAINER_CLASS, "main.py": TRAINER_MAIN}
    findings = lint_project(tmp_path, files, "main.py", select="DDP011")
    assert _lines(findings, "DDP011") == [10]


def test_loads_of_different_values_are_reported_each(tmp_path: Path) -> None:
    # Bound to different names: two loads, two places to fix.
    split = HORIZON_FINETUNE.replace('ckpt = torch.load(args.resume + ".sharded")',
                                     'shards = torch.load(args.resume + ".sharded")')
    findings = lint_project(tmp_path, {"config.py": CONFIG, "finetune.py": split}, "finetune.py", select="DDP011")
    assert _lines(findings, "DDP011") == [12, 34, 36]
    # One after the other, not in exclusive arms: both run.
    sequential = HORIZON_FINETUNE.replace("            else:\n                ckpt = torch.load(args.resume)",
                                          "            ckpt = torch.load(args.resume)")
    findings = lint_project(tmp_path, {"config.py": CONFIG, "finetune.py": sequential}, "finetune.py",
                            select="DDP011")
    assert _lines(findings, "DDP011") == [12, 34, 35]


OPTIMIZER_BY_MODEL = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--model_type", default="VisNet")
        parser.add_argument("--batch_size", type=int, default=16)
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        data = list(range(100))
        loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        if args.model_type == "DMRNet":
            optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
        for epoch in range(10):
            loader.sampler.set_epoch(epoch)
            for x in loader:
                optimizer.zero_grad()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_one_optimizer_picked_by_the_model_type_is_one_finding(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train_ddp.py": OPTIMIZER_BY_MODEL}, "train_ddp.py", select="DDP004")
    assert _lines(findings, "DDP004") == [25]  # the default model type's optimizer
    # Two optimizers of two models (a GAN's generator and discriminator): two findings.
    two = OPTIMIZER_BY_MODEL.replace("optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)",
                                     "opt_d = torch.optim.Adam(model.parameters(), lr=2e-4)")
    findings = lint_project(tmp_path, {"train_ddp.py": two}, "train_ddp.py", select="DDP004")
    assert _lines(findings, "DDP004") == [23, 25]
