"""Learning rates written as constants where real scripts write them, through `ddpcheck lint`:
in an optimizer's parameter groups and in a settings dict the script fills itself. Rates read
from the command line or a config file stay clean."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

GAN_TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nets import Generator


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=2e-4)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        gen = DDP(Generator().cuda(), device_ids=[local_rank])
        stem = [p for n, p in gen.named_parameters() if n.startswith("module.stem")]
        rest = [p for n, p in gen.named_parameters() if not n.startswith("module.stem")]
        optimizer = torch.optim.AdamW(
            [
                {{"params": rest, "lr": args.lr}},
                {{"params": stem, "lr": {stem_lr}}},
            ],
            betas=(0.5, 0.9),
        )
        for step in range(1000):
            optimizer.zero_grad()
            gen(torch.randn(8, 16, device="cuda")).mean().backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

NETS = """\
    import torch


    class Generator(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Linear(16, 32)
            self.body = torch.nn.Linear(32, 16)

        def forward(self, z):
            return self.body(self.stem(z))
    """


def test_a_literal_rate_in_a_parameter_group_is_reported_where_it_is_written(tmp_path):
    _write(tmp_path, {"nets.py": NETS, "train.py": GAN_TRAIN.format(stem_lr="1e-4")})
    assert _findings(tmp_path, "train.py", select="DDP004") == {("train.py", 24, "DDP004")}


def test_parameter_groups_with_rates_from_the_command_line_or_the_world_size_are_clean(tmp_path):
    _write(tmp_path, {"nets.py": NETS,
                      "train.py": GAN_TRAIN.format(stem_lr="args.lr * 0.5")})
    assert _findings(tmp_path, "train.py", select="DDP004") == set()
    _write(tmp_path, {"train.py": GAN_TRAIN.format(stem_lr="1e-4 * dist.get_world_size()")})
    assert _findings(tmp_path, "train.py", select="DDP004") == set()


LM_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel

    from lm_settings import default_settings


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        settings = default_settings()
        settings["epochs"] = 3
        settings["learning_rate"] = 1e-3
        {override}model = DistributedDataParallel(torch.nn.Embedding(1000, 64).cuda(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=settings["learning_rate"])
        for epoch in range(settings["epochs"]):
            optimizer.zero_grad()
            model(torch.randint(0, 1000, (settings["batch_size"], 32), device=rank)).sum().backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n,), nprocs=n)
    """

LM_SETTINGS = """\
    import json
    import os


    def default_settings():
        settings = {"batch_size": 8, "layers": 12}
        if os.path.exists("settings.json"):
            with open("settings.json") as f:
                settings.update(json.load(f))
        return settings
    """


def test_a_rate_the_script_sets_in_its_settings_dict_is_reported(tmp_path):
    _write(tmp_path, {"lm_settings.py": LM_SETTINGS, "train.py": LM_TRAIN.format(override="")})
    assert _findings(tmp_path, "train.py", select="DDP004") == {("train.py", 16, "DDP004")}


def test_a_settings_rate_that_the_command_line_may_replace_is_clean(tmp_path):
    override = ('if len(__import__("sys").argv) > 1:\n'
                '            settings["learning_rate"] = float(__import__("sys").argv[1])\n        ')
    _write(tmp_path, {"lm_settings.py": LM_SETTINGS, "train.py": LM_TRAIN.format(override=override)})
    assert _findings(tmp_path, "train.py", select="DDP004") == set()


def test_a_rate_read_from_a_settings_file_is_clean(tmp_path):
    _write(tmp_path, {"lm_settings.py": LM_SETTINGS,
                      "train.py": LM_TRAIN.format(override="").replace(
                          '        settings["learning_rate"] = 1e-3\n', "")})
    assert _findings(tmp_path, "train.py", select="DDP004") == set()
