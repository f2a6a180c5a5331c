"""A `set_epoch` given a number written in (`loader.sampler.set_epoch(2)` in the epoch loop)
passes the same epoch on every pass, as if it were never called. Through `ddpcheck lint` on a
small ray-batch trainer; the loop's counter stays clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

SCRIPT = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(args):
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        rays = torch.load(args.rays_file, map_location="cpu")
        train_sampler = torch.utils.data.distributed.DistributedSampler(rays)
        trainloader = torch.utils.data.DataLoader(rays, batch_size=args.batch_size, sampler=train_sampler)
        model = DDP(torch.nn.Linear(6, 4).cuda(), device_ids=[args.local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lrate)
        for epoch in range(args.epochs):
            trainloader.sampler.set_epoch(2)
            for batch in trainloader:
                loss = model(batch.cuda()).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--rays_file", type=str)
        parser.add_argument("--batch_size", type=int, default=1024)
        parser.add_argument("--lrate", type=float, default=5e-4)
        parser.add_argument("--epochs", type=int, default=50)
        train(parser.parse_args())
"""


def test_a_literal_epoch_is_the_same_on_every_pass(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SCRIPT}, "DDP002") == [("train.py", 17)]


def test_the_loop_counter_is_clean(tmp_path: Path) -> None:
    counted = SCRIPT.replace("set_epoch(2)", "set_epoch(epoch)")
    assert lines(tmp_path, {"train.py": counted}, "DDP002") == []


def test_a_reset_to_zero_after_the_live_set_epoch_is_clean(tmp_path: Path) -> None:
    # `set_epoch(0)` before an evaluation pass: the next pass sets the epoch again first.
    reset = SCRIPT.replace("set_epoch(2)", "set_epoch(epoch)").replace(
        "                optimizer.step()\n",
        "                optimizer.step()\n            trainloader.sampler.set_epoch(0)\n")
    assert lines(tmp_path, {"train.py": reset}, "DDP002") == []
