"""Seeds, checkpoints, reductions and accumulation on mechanisms seen on public scripts of batch
21: a seed from a configuration class that reads its file (DDP029), a seeding helper that draws a
seed when given none, the run's tracker configuration, the GPU generator under a library network
built from its configuration; a checkpoint loader of the project that strips `module.` used by an
inference script beside the run (DDP019); score matrices each rank fills for its own rows and
sums (DDP022); `no_sync` around every micro-batch through a project helper (DDP031). Each through
`ddpcheck lint` on a small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# --- DDP029 -------------------------------------------------------------------------------------

CONFIG_CLASS = """\
    import json


    class Settings:
        @staticmethod
        def from_args(args):
            settings = Settings(args.settings)
            settings.__dict__.update(args.__dict__)
            return settings

        def __init__(self, path):
            with open(path) as f:
                self.__dict__ = json.load(f)
            {extra}
"""

CONFIG_SCRIPT = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from settings import Settings


    def main(rank, settings):
        dist.init_process_group("nccl")
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, sampler=sampler, num_workers=4)
        augment = transforms.RandomResizedCrop(96)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--settings", default="settings.json")
        args = parser.parse_args()
        settings = Settings.from_args(args)
        torch.manual_seed(settings.seed)
        main(int(os.environ["RANK"]), settings)
"""


def test_seed_of_a_configuration_class_that_reads_its_file(tmp_path: Path) -> None:
    files = {"settings.py": CONFIG_CLASS.format(extra="self.name = 'run'"), "train.py": CONFIG_SCRIPT}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 23)]


def test_seed_of_a_configuration_class_offset_by_rank_is_clean(tmp_path: Path) -> None:
    # The class itself adds the rank to the seed it read.
    files = {"settings.py": CONFIG_CLASS.format(extra="self.seed = self.seed + int(os.environ['RANK'])"),
             "train.py": CONFIG_SCRIPT}
    assert lines(tmp_path, files, "DDP029") == []


FALLBACK_HELPER = """\
    import random

    import numpy as np
    import torch


    def fix_seed(opt):
        if opt.random_seed is None:
            opt.random_seed = random.randint(1, 10000)
        print("seed:", opt.random_seed)
        random.seed(opt.random_seed)
        torch.manual_seed(opt.random_seed)
        np.random.seed(opt.random_seed)
"""

FALLBACK_SCRIPT = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader, DistributedSampler

    from helpers import fix_seed


    def worker(gpu, opt):
        fix_seed(opt)
        dist.init_process_group("nccl", rank=gpu, world_size=opt.gpus)
        loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=16)
        for x in loader:
            noise = torch.randn_like(x)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--random_seed", type=int, default={default})
        parser.add_argument("--gpus", type=int, default=2)
        opt = parser.parse_args()
        mp.spawn(worker, nprocs=opt.gpus, args=(opt,))


    if __name__ == "__main__":
        main()
"""


def test_seed_helper_that_draws_a_seed_when_given_none(tmp_path: Path) -> None:
    files = {"helpers.py": FALLBACK_HELPER, "train.py": FALLBACK_SCRIPT.format(default="42")}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 12)]


def test_seed_helper_drawing_its_own_seed_by_default_is_clean(tmp_path: Path) -> None:
    # No seed by default: every rank draws its own.
    files = {"helpers.py": FALLBACK_HELPER, "train.py": FALLBACK_SCRIPT.format(default="None")}
    assert lines(tmp_path, files, "DDP029") == []


TRACKED_OPTIONS = """\
    import argparse
    import os

    import wandb


    def get_args():
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=1234)
        parser.add_argument("--use_wandb", action="store_true")
        args = parser.parse_args()
        args.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if args.use_wandb and args.local_rank == 0:
            wandb.init(project="tryon")
            wandb.config.update(args)
            args = wandb.config
        return args
"""

TRACKED_SCRIPT = """\
    import random

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from options import get_args


    def seed_all(seed=1):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed({seed})


    def main():
        args = get_args()
        seed_all(args.seed)
        dist.init_process_group("nccl")
        loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=8, num_workers=4)
        flip = torch.rand(1) > 0.5


    if __name__ == "__main__":
        main()
"""


def test_seed_of_the_tracker_configuration_filled_from_the_command_line(tmp_path: Path) -> None:
    files = {"options.py": TRACKED_OPTIONS, "train.py": TRACKED_SCRIPT.format(seed="seed")}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 19)]


def test_seed_helper_offsetting_by_rank_is_clean(tmp_path: Path) -> None:
    files = {"options.py": TRACKED_OPTIONS, "train.py": TRACKED_SCRIPT.format(seed="seed + dist.get_rank()")}
    assert lines(tmp_path, files, "DDP029") == []


GPU_SEED_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from transformers import GPT2Config, GPT2LMHeadModel


    class Captioner(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.decoder = {network}

        def forward(self, tokens):
            return self.decoder(tokens).logits


    def train(args):
        dist.init_process_group("nccl")
        torch.cuda.manual_seed_all(1234)
        model = torch.nn.parallel.DistributedDataParallel(Captioner(GPT2Config()).cuda())
        loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=32)
        for tokens in loader:
            model(tokens.cuda()).sum().backward()
"""


def test_gpu_seed_under_a_library_network_built_from_its_configuration(tmp_path: Path) -> None:
    files = {"train.py": GPU_SEED_SCRIPT.format(network="GPT2LMHeadModel(config)")}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 18)]


def test_gpu_seed_under_a_network_without_dropout_is_clean(tmp_path: Path) -> None:
    files = {"train.py": GPU_SEED_SCRIPT.format(network="torch.nn.Linear(config.n_embd, 10)")}
    assert lines(tmp_path, files, "DDP029") == []


# --- DDP019 -------------------------------------------------------------------------------------

LOADER_UTIL = """\
    from collections import OrderedDict

    import torch


    def load_weights(model, path):
        state = torch.load(path, map_location="cpu")
        cleaned = OrderedDict()
        for key, value in state.items():
            {strip}
            cleaned[key] = value
        model.load_state_dict(cleaned)
"""

TRAIN_TOOL = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main(local_rank):
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        for epoch in range(10):
            if local_rank == 0:
                torch.save(model.state_dict(), f"model_{epoch}.pth")
"""

# The repository root, from which the tools import the project's packages.
PROJECT = """\
    [project]
    name = "classifier"
"""

INFER_TOOL = """\
    import torch

    from utils.weights import *


    def main(path):
        net = torch.nn.Linear(8, 2)
        load_weights(net, path)
        net.eval()
"""


def test_inference_script_beside_loads_through_a_stripping_loader_is_clean(tmp_path: Path) -> None:
    files = {"pyproject.toml": PROJECT, "utils/__init__.py": "", "utils/weights.py": LOADER_UTIL.format(
        strip="if key.startswith('module.'):\n                key = key[7:]"),
        "tools/train.py": TRAIN_TOOL, "tools/infer.py": INFER_TOOL}
    assert lines(tmp_path, files, "DDP019", "tools/train.py") == []


def test_inference_script_beside_with_a_loader_that_keeps_the_prefix(tmp_path: Path) -> None:
    files = {"pyproject.toml": PROJECT, "utils/__init__.py": "", "utils/weights.py": LOADER_UTIL.format(strip="pass"),
             "tools/train.py": TRAIN_TOOL, "tools/infer.py": INFER_TOOL}
    assert lines(tmp_path, files, "DDP019", "tools/train.py") == [("train.py", 11)]


# --- DDP022 -------------------------------------------------------------------------------------

RETRIEVAL_SCRIPT = """\
    import torch
    import torch.distributed as dist


    def rank_pairs(model, sims, n_img, n_txt, k):
        world_size = dist.get_world_size()
        rank = dist.get_rank()
        step = sims.size(0) // world_size + 1
        start = rank * step
        end = min(sims.size(0), start + step)
        scores = torch.full((n_img, n_txt), -100.0).cuda()
        for i, row in enumerate(sims[start:end]):
            _, top = row.topk(k)
            scores[{row}, top] = model(i, top)
        return scores


    @torch.no_grad()
    def evaluate(model, sims, n_img, n_txt):
        i2t_scores = rank_pairs(model, sims, n_img, n_txt, 16)
        dist.barrier()
        dist.all_reduce(i2t_scores, op=dist.ReduceOp.SUM)
        return i2t_scores.cpu()


    def main():
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(build().cuda())
        print(evaluate(model, sims, 100, 500))
"""


def test_scores_each_rank_fills_for_its_own_rows_summed_is_clean(tmp_path: Path) -> None:
    files = {"train.py": RETRIEVAL_SCRIPT.format(row="start + i")}
    assert lines(tmp_path, files, "DDP022") == []


def test_scores_every_rank_fills_alike_summed(tmp_path: Path) -> None:
    files = {"train.py": RETRIEVAL_SCRIPT.format(row="i")}
    assert lines(tmp_path, files, "DDP022") == [("train.py", 22)]


# --- DDP031 -------------------------------------------------------------------------------------

SYNC_UTIL = """\
    import contextlib

    import torch.nn as nn


    def grad_sync_off(model):
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()
"""

ACCUM_SCRIPT = """\
    import torch
    import torch.distributed as dist

    import util


    def train(model, loader, optimizer, scaler, accum):
        for idx, (x, y) in enumerate(loader):
            {body}
            if (idx + 1) % accum == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)


    def main(args):
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
        optimizer = torch.optim.AdamW(model.parameters())
        train(model, loader, optimizer, torch.cuda.amp.GradScaler(), args.accum)
"""

EVERY_MICRO_BATCH = """\
with util.grad_sync_off(model):
                loss = model(x.cuda()).mean()
                scaler.scale(loss / accum).backward()"""

LAST_ONE_SYNCED = """\
if (idx + 1) % accum != 0:
                with util.grad_sync_off(model):
                    scaler.scale(model(x.cuda()).mean() / accum).backward()
            else:
                scaler.scale(model(x.cuda()).mean() / accum).backward()"""


def test_no_sync_helper_around_every_micro_batch(tmp_path: Path) -> None:
    files = {"util.py": SYNC_UTIL, "train.py": ACCUM_SCRIPT.format(body=EVERY_MICRO_BATCH)}
    assert lines(tmp_path, files, "DDP031") == [("train.py", 13)]


def test_no_sync_helper_with_the_last_micro_batch_synced_is_clean(tmp_path: Path) -> None:
    files = {"util.py": SYNC_UTIL, "train.py": ACCUM_SCRIPT.format(body=LAST_ONE_SYNCED)}
    assert lines(tmp_path, files, "DDP031") == []
