"""Three ways real scripts write their set-up, through `ddpcheck lint` on small projects:

- a module flag a set-up function rebinds with `global` (`is_distributed = False` at the top,
  `global is_distributed; is_distributed = True` in `init()`): code guarded by the flag runs;
- a teardown in the process that starts the workers (`mp.spawn(main, ...)` then `cleanup()` in
  the `__main__` block) tears down no worker's group (DDP005);
- the argument namespace kept whole as a record (`{"args": vars(args)}` in a checkpoint) reads
  no `--local_rank` entry (DDP008).
"""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

LIBRARY = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    rank = 0
    is_distributed = False


    def init(backend="nccl"):
        global is_distributed
        global rank
        if "RANK" in os.environ:
            {flag}
            rank = int(os.environ["RANK"])
            dist.init_process_group(backend)
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


    def to_loader(ds, **kwargs):
        if is_distributed:
            return DataLoader(ds, sampler=DistributedSampler(ds, shuffle=False), **kwargs)
        return DataLoader(ds, **kwargs)


    def validate(model, loader):
        total = torch.zeros(1, device="cuda")
        with torch.no_grad():
            for x, y in loader:
                total += torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        total /= len(loader)
        if is_distributed:
            dist.all_reduce(total, op=dist.ReduceOp.AVG)
        return total.item()
    """

SCRIPT = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import lib


    def main(val_set):
        lib.init()
        model = DDP(torch.nn.Linear(4, 1).cuda())
        val_loader = lib.to_loader(val_set, batch_size=64)
        print(lib.validate(model, val_loader))
        torch.distributed.destroy_process_group()


    if __name__ == "__main__":
        main(None)
    """


def test_a_module_flag_a_set_up_function_turns_on_with_global_is_on(tmp_path):
    _write(tmp_path, {"lib.py": LIBRARY.replace("{flag}", "is_distributed = True"), "train.py": SCRIPT})
    assert _findings(tmp_path, "train.py", select="DDP018") == {("lib.py", 23, "DDP018")}


def test_a_module_flag_nothing_turns_on_stays_off(tmp_path):
    # Without the rebinding the sampler is never made: the flag is False on every path.
    _write(tmp_path, {"lib.py": LIBRARY.replace("{flag}", "pass"), "train.py": SCRIPT})
    assert _findings(tmp_path, "train.py", select="DDP018") == set()


SPAWNED = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def setup(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)


    def cleanup():
        dist.destroy_process_group()


    def main(rank, world_size):
        setup(rank, world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
        for _ in range(10):
            optimizer.zero_grad()
            model(torch.randn(8, 4).cuda()).sum().backward()
            optimizer.step(){worker_teardown}


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(main, args=(world_size,), nprocs=world_size, join=True){parent_teardown}
    """


def _spawned(tmp_path, worker_teardown="", parent_teardown=""):
    _write(tmp_path, {"train.py": SPAWNED.replace("{worker_teardown}", worker_teardown)
                      .replace("{parent_teardown}", parent_teardown)})
    return _findings(tmp_path, "train.py", select="DDP005")


def test_a_teardown_after_spawn_in_the_parent_tears_down_no_worker_group(tmp_path):
    assert _spawned(tmp_path, parent_teardown="\n        cleanup()") == {("train.py", 12, "DDP005")}


def test_a_teardown_in_the_workers_is_clean(tmp_path):
    assert _spawned(tmp_path, worker_teardown="\n        cleanup()") == set()
    assert _spawned(tmp_path / "both", "\n        cleanup()", "\n        cleanup()") == set()


FLAGGED = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(rank, args):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29500"
        dist.init_process_group("nccl", rank=rank, world_size=args.world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[rank])
        if rank == 0:
            torch.save({{"model": model.module.state_dict(), "args": {record}}}, "last.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--world_size", type=int, default=2)
        args = parser.parse_args()
        mp.spawn(worker, args=(args,), nprocs=args.world_size)
    """


def test_a_namespace_saved_whole_reads_no_local_rank_entry(tmp_path):
    _write(tmp_path, {"train.py": FLAGGED.format(record="vars(args)")})
    assert _findings(tmp_path, "train.py", select="DDP008") == set()
    # Read by its entry, the flag is the local rank's source, which torchrun never passes.
    _write(tmp_path / "read", {"train.py": FLAGGED.format(record="args.local_rank")})
    assert _findings(tmp_path / "read", "train.py", select="DDP008") == {("train.py", 23, "DDP008")}


GLOBAL_MODEL = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = None


    def main():
        global model
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        model = torch.nn.Linear(4, 1).to(device)
        model = DDP(model, device_ids=[local_rank])
        train(model)
        model = torch.load("best.pt", map_location=device)
        model = model.{move}
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_a_global_keeps_the_order_of_its_own_functions_statements(tmp_path):
    # The model reloaded after training is a plain module: moving it is no move of the wrapper.
    _write(tmp_path, {"train.py": GLOBAL_MODEL.replace("{move}", "to(device)")})
    assert _findings(tmp_path, "train.py", select="DDP014") == set()
