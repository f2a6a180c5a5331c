"""Code that looks like a DDP mistake but is safe for a reason written elsewhere in the project,
through `ddpcheck lint`: each test writes a small project, checks it is quiet, and checks that the
variant without that reason is still reported."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

VOS_TRAIN = """\
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from dataset.clips import ClipDataset

    torch.manual_seed(2718)
    np.random.seed(2718)

    dist.init_process_group(backend="nccl")
    local_rank = dist.get_rank()
    torch.cuda.set_device(local_rank)


    def worker_init_fn(worker_id):
        return np.random.seed({worker_seed})


    def make_loader(dataset):
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, rank=local_rank, shuffle=True)
        loader = DataLoader(dataset, 8, sampler=sampler, num_workers=4,
                            worker_init_fn=worker_init_fn, drop_last=True)
        return sampler, loader


    sampler, loader = make_loader(ClipDataset("/data/clips"))
    """

CLIPS = """\
    import numpy as np
    import torch
    from torchvision import transforms


    class ClipDataset(torch.utils.data.Dataset):
        def __init__(self, root):
            self.root = root
            self.augment = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.RandomAffine(15)])

        def __getitem__(self, index):
            torch.manual_seed(np.random.randint(2147483647))
            return self.augment(self.load(index))
    """


def test_workers_reseeded_with_the_rank_draw_different_augmentation(tmp_path):
    seed = "torch.initial_seed() % (2**31) + worker_id + local_rank * 100"
    _write(tmp_path, {"train.py": VOS_TRAIN.format(worker_seed=seed), "dataset/clips.py": CLIPS})
    assert _findings(tmp_path, "train.py", select="DDP029") == set()


def test_workers_reseeded_alike_on_every_rank_are_still_reported(tmp_path):
    seed = "torch.initial_seed() % (2**31) + worker_id"
    _write(tmp_path, {"train.py": VOS_TRAIN.format(worker_seed=seed), "dataset/clips.py": CLIPS})
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 8, "DDP029")}


def test_workers_reseeded_with_the_rank_leave_the_model_dropout_alike(tmp_path):
    seed = "torch.initial_seed() % (2**31) + worker_id + local_rank * 100"
    _write(tmp_path, {
        "train.py": VOS_TRAIN.format(worker_seed=seed) + "model = torch.nn.Sequential(torch.nn.Dropout(0.1))\n",
        "dataset/clips.py": CLIPS,
    })
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 8, "DDP029")}


POSE_TRAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from lib.config import cfg
    from lib.models import build_pose_net


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", type=int, default=None)
        parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456")
        args = parser.parse_args()
        args.world_size = torch.cuda.device_count()
        if cfg.MULTIPROCESSING_DISTRIBUTED:
            mp.spawn(main_worker, nprocs=args.world_size, args=(args,))
        else:
            main_worker({single_gpu}, args)


    def main_worker(gpu, args):
        args.gpu = gpu
        dist.init_process_group(backend="nccl", init_method=args.dist_url,
                                world_size=args.world_size, rank=gpu)
        model = build_pose_net(cfg)
        if args.gpu is not None:
            torch.cuda.set_device(args.gpu)
            model.cuda(args.gpu)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        else:
            model.cuda()
            model = torch.nn.parallel.DistributedDataParallel(model)


    if __name__ == "__main__":
        main()
    """


def test_device_set_under_a_test_that_always_holds(tmp_path):
    _write(tmp_path, {"train.py": POSE_TRAIN.format(single_gpu='",".join(str(i) for i in cfg.GPUS)')})
    assert _findings(tmp_path, "train.py", select="DDP003") == set()


def test_device_set_only_when_an_option_is_given_is_still_reported(tmp_path):
    _write(tmp_path, {"train.py": POSE_TRAIN.format(single_gpu="args.gpu")})
    assert _findings(tmp_path, "train.py", select="DDP003") == {("train.py", 25, "DDP003")}


FORECAST_TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from models.patch_tst import PatchTST
    from models.gpt4ts import GPT4TS


    def main(args):
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        if args.model == "PatchTST":
            model = PatchTST(args)
        else:
            model = GPT4TS(args)
        model = DDP(model.to(rank), device_ids=[rank])


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--model", type=str, default="{default}")
        main(parser.parse_args())
    """

PATCH_TST = """\
    import torch.nn as nn


    class PatchTST(nn.Module):
        def __init__(self, args):
            super().__init__()
            self.proj = nn.Linear(16, args.d_model)
            self.norm = nn.BatchNorm1d(args.d_model)
    """

GPT4TS = """\
    import torch.nn as nn


    class GPT4TS(nn.Module):
        def __init__(self, args):
            super().__init__()
            self.proj = nn.Linear(16, args.d_model)
            self.norm = nn.LayerNorm(args.d_model)
    """


def test_batchnorm_only_in_a_model_the_default_option_does_not_build(tmp_path):
    _write(tmp_path, {"train.py": FORECAST_TRAIN.format(default="GPT4TS_multi"),
                      "models/patch_tst.py": PATCH_TST, "models/gpt4ts.py": GPT4TS})
    assert _findings(tmp_path, "train.py", select="DDP012") == set()


def test_batchnorm_in_the_model_the_default_option_builds_is_still_reported(tmp_path):
    _write(tmp_path, {"train.py": FORECAST_TRAIN.format(default="PatchTST"),
                      "models/patch_tst.py": PATCH_TST, "models/gpt4ts.py": GPT4TS})
    assert _findings(tmp_path, "train.py", select="DDP012") == {("train.py", 20, "DDP012")}


SPEAKER_TRAIN = """\
    import os
    from dataclasses import dataclass

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from networks.embedder import SpeakerEmbedder


    @dataclass
    class TrainConfig:
        start_lr: float = 1e-6
        max_lr: float = 5e-5
        n_steps: int = 100000


    def one_cycle(start, peak, step, total):
        half = total // 2
        return start + (peak - start) * step / half if step < half else peak * (total - step) / half


    def train(cfg):
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = DDP(SpeakerEmbedder().cuda(rank), device_ids=[rank])
        optim = torch.optim.AdamW(model.parameters(), {lr}, betas=(0.9, 0.98))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optim, lr_lambda=lambda step: one_cycle(cfg.start_lr, cfg.max_lr, step, cfg.n_steps))
        for step in range(cfg.n_steps):
            optim.step()
            scheduler.step()


    if __name__ == "__main__":
        train(TrainConfig())
    """


def test_unit_rate_scaled_by_a_lambda_schedule_is_the_schedules_rate(tmp_path):
    _write(tmp_path, {"train.py": SPEAKER_TRAIN.format(lr="1.0")})
    assert _findings(tmp_path, "train.py", select="DDP004") == set()


def test_constant_rate_under_a_lambda_schedule_is_still_reported(tmp_path):
    _write(tmp_path, {"train.py": SPEAKER_TRAIN.format(lr="3e-4")})
    assert _findings(tmp_path, "train.py", select="DDP004") == {("train.py", 28, "DDP004")}
