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


SEGMENTER_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from warmup import WarmupDecay

    WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))
    GLOBAL_BATCH = 128


    def run(dataset):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        {batch_line}
        loader = DataLoader(dataset, batch_size=per_gpu, sampler=DistributedSampler(dataset))
        net = DDP(torch.nn.Conv2d(3, 8, 3).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        {schedule_line}
        for images, masks in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(net(images.cuda()), masks.cuda()).backward()
            optimizer.step()
            schedule.step()
    """

WARMUP = """\
    class WarmupDecay:
        def __init__(self, optimizer, total_steps, scale=1.0):
            self.optimizer = optimizer
            self.total_steps = total_steps
            self.scale = scale
            self.count = 0

        def step(self):
            self.count += 1
            for group in self.optimizer.param_groups:
                group["lr"] = group["initial_lr"] * self.scale * min(1.0, self.count / 500)
    """

_PLAIN_BATCH = "per_gpu = 16"
_PLAIN_SCHEDULE = "schedule = WarmupDecay(optimizer, total_steps=10000)"


def _lr_project(tmp_path, batch_line=_PLAIN_BATCH, schedule_line=_PLAIN_SCHEDULE):
    _write(tmp_path, {"warmup.py": WARMUP, "train.py": SEGMENTER_TRAIN.format(
        batch_line=batch_line, schedule_line=schedule_line)})
    return _findings(tmp_path, "train.py", select="DDP004")


def test_a_constant_rate_with_a_per_rank_batch_that_does_not_shrink_is_reported(tmp_path):
    assert _lr_project(tmp_path) == {("train.py", 22, "DDP004")}
    # The step count mentions the world size, but a count of steps does not scale the rate.
    assert _lr_project(tmp_path, schedule_line="schedule = WarmupDecay(optimizer, total_steps=9000 // WORLD_SIZE)") \
        == {("train.py", 22, "DDP004")}
    # The optimizer handed on with the number of ranks itself, not with a scale computed from it.
    assert _lr_project(tmp_path, schedule_line=_PLAIN_SCHEDULE + "\n        print(optimizer, WORLD_SIZE)") \
        == {("train.py", 22, "DDP004")}
    # A batch name divided by something other than the number of ranks.
    assert _lr_project(tmp_path, batch_line="per_gpu = batch_size = 64 // 4") == {("train.py", 22, "DDP004")}


def test_a_global_batch_split_by_an_upper_case_world_size_keeps_the_rate_right(tmp_path):
    assert _lr_project(tmp_path, batch_line="per_gpu = batch_size = GLOBAL_BATCH // WORLD_SIZE") == set()
    assert _lr_project(tmp_path, batch_line="batch_size = 128 // dist.get_world_size()\n"
                                            "        per_gpu = batch_size") == set()
    assert _lr_project(tmp_path, batch_line="batch_size = int(128 / WORLD_SIZE)\n"
                                            "        per_gpu = batch_size") == set()


def test_a_schedule_that_scales_the_rate_by_the_world_size_is_clean(tmp_path):
    assert _lr_project(tmp_path, schedule_line=(
        "schedule = WarmupDecay(optimizer, total_steps=10000, scale=WORLD_SIZE * per_gpu / 64)")) == set()
    assert _lr_project(tmp_path, schedule_line=(
        "factor = dist.get_world_size() * per_gpu / 64\n"
        "        schedule = WarmupDecay(optimizer, 10000, factor)")) == set()
