"""Set-up rules on mechanisms seen on public scripts of batch 35: each through `ddpcheck lint` on a
small project written in the style of the scripts, with a variant that is reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A script that spawns one worker per GPU when `--spawn` is on, and otherwise calls the worker
# itself with `--gpu` (None by default). `--spawn` is a store_true flag whose default is True: no
# command line turns it off, so the `else:` arm never runs and every worker gets its spawn index.
SPAWN_FLAG = """\
    import argparse
    import random

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", default=None, type=int)
    parser.add_argument("--seed", default=None, type=int)
    parser.add_argument("--nodes", default=1, type=int)
    parser.add_argument("--spawn", action="store_true", default=True)


    class Crops(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.rand(8) * random.random()


    def main():
        args = parser.parse_args()
        if args.seed is not None:
            random.seed(args.seed)
            torch.manual_seed(args.seed)
        gpus = torch.cuda.device_count()
        if args.spawn:
            mp.spawn(worker, nprocs=gpus, args=(gpus, args))
        else:
            worker(args.gpu, gpus, args)


    def worker(gpu, gpus, args):
        args.gpu = gpu
        dist.init_process_group("nccl", init_method="env://", world_size=gpus * args.nodes, rank=gpu)
        net = torch.nn.Linear(8, 8)
        if args.gpu is not None:
            torch.cuda.set_device(args.gpu)
            net = DDP(net.cuda(args.gpu), device_ids=[args.gpu])
        else:
            net = DDP(net.cuda())
        data = Crops()
        sampler = torch.utils.data.distributed.DistributedSampler(data)
        for x in torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, sampler=sampler):
            net(x.cuda()).sum().backward()


    if __name__ == "__main__":
        main()
"""


def test_flag_that_cannot_be_turned_off_leaves_its_else_arm_dead(tmp_path: Path) -> None:
    # The worker's `args.gpu` is always the spawn index: set_device runs on every path.
    assert lines(tmp_path, {"train.py": SPAWN_FLAG}, "DDP003") == []


def test_flag_that_can_be_off_keeps_the_direct_call(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_FLAG.replace('action="store_true", default=True', 'action="store_true"')}
    assert lines(tmp_path, files, "DDP003") == [("train.py", 38)]


def test_store_false_flag_with_default_false_is_always_off(tmp_path: Path) -> None:
    # The same constant written the other way round: `if not args.no_spawn:` always spawns.
    files = {"train.py": SPAWN_FLAG.replace('"--spawn", action="store_true", default=True',
                                            '"--no-spawn", action="store_false", default=False')
             .replace("    if args.spawn:", "    if not args.no_spawn:")}
    assert lines(tmp_path, files, "DDP003") == []


def test_seed_before_an_always_taken_spawn_seeds_no_rank(tmp_path: Path) -> None:
    # The seed is set in the launching process only; spawned workers start a fresh interpreter.
    assert lines(tmp_path, {"train.py": SPAWN_FLAG}, "DDP029") == []


def test_seed_before_a_spawn_the_command_line_can_skip_is_reported(tmp_path: Path) -> None:
    # Without `--spawn` the launching process is the worker (under an outside launcher: every rank).
    files = {"train.py": SPAWN_FLAG.replace('action="store_true", default=True', 'action="store_true"')}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 28)]


# A classifier whose `--local_rank` flag (required: only the old launcher passes it) is copied into
# a configuration object's field by the project's config builder; the script sets the device from
# that field. A data sampler reads LOCAL_RANK from the environment, but only to pick its slice of
# the node's images: the device still comes from the flag.
CONFIG = """\
    class Node(dict):
        def __getattr__(self, key):
            return self[key]

        def __setattr__(self, key, value):
            self[key] = value


    _C = Node()
    _C.LOCAL_RANK = 0
    _C.BATCH = 64


    def get_config(args):
        config = Node(_C)
        if args.batch_size:
            config.BATCH = args.batch_size
        config.LOCAL_RANK = args.local_rank
        return config
"""

SAMPLER = """\
    import os

    import torch


    class NodeShardSampler(torch.utils.data.Sampler):
        # Each process of a node reads its own slice of the images held in memory.

        def __init__(self, dataset, local_rank=None):
            if local_rank is None:
                local_rank = int(os.environ.get("LOCAL_RANK", 0))
            self.local_rank = local_rank
            self.local_size = int(os.environ.get("LOCAL_SIZE", 1))
            self.dataset = dataset

        def __iter__(self):
            return iter(range(self.local_rank, len(self.dataset), self.local_size))

        def __len__(self):
            return len(self.dataset) // self.local_size


    def build_loader(dataset, batch):
        return torch.utils.data.DataLoader(dataset, batch_size=batch, sampler=NodeShardSampler(dataset))
"""

CLASSIFIER = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from config import get_config
    from data import build_loader


    def parse_option():
        parser = argparse.ArgumentParser("classifier")
        parser.add_argument("--batch-size", type=int)
        parser.add_argument("--local_rank", type=int, required=True, help="local rank for DDP")
        args, _ = parser.parse_known_args()
        return args, get_config(args)


    def main(config):
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[config.LOCAL_RANK])
        for x in build_loader(torch.randn(64, 8), config.BATCH):
            model(x.cuda()).sum().backward()


    if __name__ == "__main__":
        _, config = parse_option()
        torch.cuda.set_device(config.LOCAL_RANK)
        dist.init_process_group(backend="nccl", init_method="env://")
        main(config)
"""


def test_flag_copied_into_a_config_field_that_sets_the_device_is_reported(tmp_path: Path) -> None:
    files = {"train.py": CLASSIFIER, "config.py": CONFIG, "data.py": SAMPLER}
    assert lines(tmp_path, files, "DDP008") == [("train.py", 14)]


def test_config_field_read_from_the_environment_is_silent(tmp_path: Path) -> None:
    config = "    import os\n" + CONFIG.replace("config.LOCAL_RANK = args.local_rank",
                                                  'config.LOCAL_RANK = int(os.environ.get("LOCAL_RANK", args.local_rank))')
    files = {"train.py": CLASSIFIER, "config.py": config, "data.py": SAMPLER}
    assert lines(tmp_path, files, "DDP008") == []
