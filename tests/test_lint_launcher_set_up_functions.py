"""Set-up that only the launching process runs: a project function called from the `__main__`
block before `mp.spawn` (parsing the command line and seeding as it goes) runs in the launcher
alone, since spawned workers import the script afresh and skip that block. Through `ddpcheck
lint` on small projects in the style of spawn-launched trainers, with variants that must stay
reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

RUNNER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms


    def train(rank, world_size, args, config):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        augment = transforms.RandomHorizontalFlip()
        dataset = load_images(config.data, augment)
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
        loader = DataLoader(dataset, sampler=sampler, batch_size=config.batch_size, num_workers=4)
        net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1)).to(rank)
        model = DDP(net, device_ids=[rank])
        for epoch in range(config.epochs):
            sampler.set_epoch(epoch)
            for x in loader:
                model(x.to(rank)).sum().backward()
        dist.destroy_process_group()
"""

SCRIPT = """\
    import argparse

    import numpy as np
    import torch
    import torch.multiprocessing as mp
    import yaml

    import runner


    def parse_args_and_config():
        parser = argparse.ArgumentParser()
        parser.add_argument("--config", type=str, required=True)
        parser.add_argument("--seed", type=int, default=1234)
        args = parser.parse_args()
        with open(args.config) as f:
            config = argparse.Namespace(**yaml.safe_load(f))
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        return args, config


    def main():
        args, config = parse_args_and_config()
        print(config)
        return args, config


    if __name__ == "__main__":
        args, config = main()
        world_size = torch.cuda.device_count()
        mp.spawn(runner.train, args=(world_size, args, config), nprocs=world_size, join=True)
"""


def test_a_seed_in_a_function_the_launcher_calls_before_spawning_stays_in_the_launcher(tmp_path: Path) -> None:
    assert lines(tmp_path, {"main.py": SCRIPT, "runner.py": RUNNER}, "DDP029", "main.py") == []


def test_the_same_function_called_in_the_worker_seeds_every_rank(tmp_path: Path) -> None:
    worker = SCRIPT.replace(
        "    if __name__", "    def worker(rank, world_size):\n        args, config = main()\n"
        "        runner.train(rank, world_size, args, config)\n\n\n    if __name__").replace(
        "mp.spawn(runner.train, args=(world_size, args, config)", "mp.spawn(worker, args=(world_size,)")
    assert lines(tmp_path, {"main.py": worker, "runner.py": RUNNER}, "DDP029", "main.py") == [("main.py", 18)]


def test_a_launcher_function_that_seeds_after_a_torchrun_path_still_counts(tmp_path: Path) -> None:
    # Under `if args.spawn:` only: the other arm trains in this very process (torchrun).
    torchrun = SCRIPT.replace(
        '        mp.spawn(runner.train, args=(world_size, args, config), nprocs=world_size, join=True)\n',
        '        if args.spawn:\n'
        '            mp.spawn(runner.train, args=(world_size, args, config), nprocs=world_size, join=True)\n'
        '        else:\n'
        '            runner.train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, config)\n')
    torchrun = torchrun.replace("import argparse\n", "import argparse\n    import os\n")
    assert lines(tmp_path, {"main.py": torchrun, "runner.py": RUNNER}, "DDP029", "main.py") == [("main.py", 19)]
