"""Who writes and prints (DDP010, DDP020, DDP009, DDP019): mechanisms seen on public scripts of
batch 24, each through `ddpcheck lint` on a small project written in the style of the scripts,
with the variant that must stay silent (or must still be reported)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A worker that `mp.spawn` starts (its first parameter is the process index, the local rank) and
# that the same script also calls plainly when it is not distributed. It hands the index on by
# keyword as `device=gpu`; the epoch function saves and prints under `device == 0 or not
# args.distributed`: one writer per node.
SPAWN_INDEX_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run_epoch(loader, model, optimizer, epoch, device, args):
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        {guard}
            torch.save(model.state_dict(), os.path.join(args.out, "last.pth"))
            print("epoch", epoch, "done")


    def main_worker(gpu, args):
        if args.distributed:
            dist.init_process_group("nccl", rank=args.nr * args.gpus + gpu, world_size=args.world_size)
            torch.cuda.set_device(gpu)
        model = torch.nn.Linear(8, 2).to(gpu)
        if args.distributed:
            model = DDP(model, device_ids=[gpu])
        optimizer = torch.optim.Adam(model.parameters(), args.lr)
        sampler = torch.utils.data.distributed.DistributedSampler(list(range(64))) if args.distributed else None
        loader = torch.utils.data.DataLoader(list(range(64)), batch_size=8, sampler=sampler)
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            run_epoch(loader=loader, model=model, optimizer=optimizer, epoch=epoch, device=gpu, args=args)
        if args.distributed:
            dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--out", default="out")
        parser.add_argument("--lr", type=float, default=1e-3)
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--gpus", type=int, default=0)
        parser.add_argument("--nodes", type=int, default=1)
        parser.add_argument("--nr", type=int, default=0)
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        if args.distributed:
            ngpus = torch.cuda.device_count()
            args.world_size = ngpus * args.nodes
            mp.spawn(main_worker, nprocs=ngpus, args=(args,), join=True)
        else:
            main_worker(args.gpus, args)
"""


def test_spawn_index_guard_beside_a_plain_call_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_INDEX_SCRIPT.format(guard="if device == 0 or not args.distributed:")}
    assert lines(tmp_path, files, "DDP010,DDP020") == []


def test_unguarded_save_in_spawned_worker_is_still_reported(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_INDEX_SCRIPT.format(guard="if epoch % 2 == 0:")}
    assert lines(tmp_path, files, "DDP010,DDP020") == [("train.py", 18), ("train.py", 19)]
