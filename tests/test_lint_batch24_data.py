"""Data loading and checkpoint loading (DDP002, DDP011) on mechanisms seen on public scripts of
batch 24: each through `ddpcheck lint` on a small project written in the style of the scripts,
with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A step-based trainer that draws from `itertools.cycle(loader)`: cycle keeps the first pass and
# replays it, so the shuffling sampler's order never changes.
CYCLE_SCRIPT = """\
    import os
    from itertools import cycle
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def train(rank, world_size, steps):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 8))
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).to(rank), device_ids=[rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        {draw}
        for step, (x,) in enumerate(batches):
            optimizer.zero_grad()
            model(x.to(rank)).mean().backward()
            optimizer.step()
            if step == steps:
                break
        dist.destroy_process_group()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(train, args=(n, 10000), nprocs=n)
"""


def test_itertools_cycle_over_a_shuffling_sampler_loader(tmp_path: Path) -> None:
    files = {"train.py": CYCLE_SCRIPT.format(draw="batches = cycle(loader)")}
    assert lines(tmp_path, files, "DDP002") == [("train.py", 17)]


def test_itertools_cycle_through_the_module_name(tmp_path: Path) -> None:
    files = {"train.py": CYCLE_SCRIPT.format(draw="import itertools\n        batches = itertools.cycle(loader)")}
    assert lines(tmp_path, files, "DDP002") == [("train.py", 18)]


def test_one_pass_of_the_loader_without_cycle_is_clean(tmp_path: Path) -> None:
    # One pass only: no epoch repeats an order.
    files = {"train.py": CYCLE_SCRIPT.format(draw="batches = loader")}
    assert lines(tmp_path, files, "DDP002") == []


# The data is loaded again after pruning and the new sampler handed to `train()` beside the
# loader built from the first one: the `set_epoch` in `train()` never reaches the loader's sampler.
RELOAD_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def load_data(args):
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 8))
        sampler = DistributedSampler(dataset)
        return dataset, sampler


    def train(model, epochs, train_sampler, data_loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            train_sampler.set_epoch(epoch)
            for (x,) in data_loader:
                optimizer.zero_grad()
                model(x.cuda()).mean().backward()
                optimizer.step()


    def main(args):
        dist.init_process_group("nccl")
        dataset, train_sampler = load_data(args)
        data_loader = DataLoader(dataset, batch_size=8, sampler=train_sampler)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).cuda())
        if args.sparsity_learning:
            train(model, args.sl_epochs, train_sampler=train_sampler, data_loader=data_loader)
        prune(model)
        {reload}
        train(model, args.epochs, train_sampler=train_sampler, data_loader=data_loader)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""


def test_a_new_sampler_handed_with_the_old_loader(tmp_path: Path) -> None:
    files = {"train.py": RELOAD_SCRIPT.format(reload="dataset, train_sampler = load_data(args)")}
    assert lines(tmp_path, files, "DDP002") == [("train.py", 15)]


def test_the_loader_rebuilt_from_the_new_sampler_is_clean(tmp_path: Path) -> None:
    files = {"train.py": RELOAD_SCRIPT.format(
        reload="dataset, train_sampler = load_data(args)\n"
               "        data_loader = DataLoader(dataset, batch_size=8, sampler=train_sampler)")}
    assert lines(tmp_path, files, "DDP002") == []


def test_the_same_sampler_handed_twice_is_clean(tmp_path: Path) -> None:
    files = {"train.py": RELOAD_SCRIPT.format(reload="pass")}
    assert lines(tmp_path, files, "DDP002") == []


# A launcher that lists the GPUs of the node in CUDA_VISIBLE_DEVICES, then spawns one worker per
# visible GPU through a helper: `cuda:0` is not each worker's own GPU, so a checkpoint saved from
# it lands on GPU 0 in every worker.
VISIBLE_UTIL = """\
    import torch
    import torch.distributed as dist


    def run_process(local_rank, nprocs, func, args):
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", init_method="tcp://localhost:9999", world_size=nprocs, rank=local_rank)
        func(args)


    def launch_processes(args, func):
        n = torch.cuda.device_count()
        if n > 1:
            torch.multiprocessing.spawn(run_process, nprocs=n, args=(n, func, args))
        else:
            func(args)
"""

VISIBLE_SCRIPT = """\
    import argparse
    import os
    import torch
    from helper import launch_processes


    def load_checkpoint(model, path):
        checkpoint = torch.load(path)
        model.load_state_dict(checkpoint["state_dict"])
        return checkpoint["epoch"]


    def train(args):
        model = torch.nn.Linear(8, 1).cuda()
        if args.checkpoint_path is not None:
            load_checkpoint(model, args.checkpoint_path)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", default="0,1", type=str)
        parser.add_argument("--checkpoint_path", default=None, type=str)
        args = parser.parse_args()
        {visible}
        launch_processes(args, train)
"""


def test_gpus_listed_by_the_launcher_before_it_spawns_are_shared(tmp_path: Path) -> None:
    files = {"helper.py": VISIBLE_UTIL,
             "train.py": VISIBLE_SCRIPT.format(visible='os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)')}
    assert lines(tmp_path, files, "DDP011") == [("train.py", 8)]


WORKER_PINNED_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def main_worker(gpu, args):
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
        dist.init_process_group("nccl", rank=gpu, world_size=args.world_size)
        state = torch.load(args.checkpoint)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).cuda())
        model.load_state_dict(state)


    if __name__ == "__main__":
        args = parse_args()
        mp.spawn(main_worker, nprocs=args.world_size, args=(args,))
"""


def test_one_gpu_set_in_each_worker_is_clean(tmp_path: Path) -> None:
    # The worker pins itself to its own GPU: cuda:0 is its own.
    assert lines(tmp_path, {"train.py": WORKER_PINNED_SCRIPT}, "DDP011") == []


# Embeddings computed once and kept in a file: read back when the file is there, else computed
# and saved. A cache of outputs, not a checkpoint.
MEMO_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist


    def get_embeddings(model, loader, path, load_pkl=True):
        if os.path.exists(path) and load_pkl:
            with open(path, "rb") as handle:
                embeddings = torch.load(handle)
        else:
            embeddings = torch.cat([model(x).detach().cpu() for x in loader])
            if dist.get_rank() == 0:
                with open(path, "wb") as handle:
                    torch.save({saved}, handle)
        return embeddings


    def main():
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4).cuda())
        print(get_embeddings(model, [torch.randn(2, 8).cuda()], "out/embeddings.pkl").shape)


    if __name__ == "__main__":
        main()
"""


def test_outputs_read_back_where_they_are_otherwise_computed_and_saved_are_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": MEMO_SCRIPT.format(saved="embeddings")}, "DDP011") == []


def test_a_load_beside_the_save_of_something_else_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": MEMO_SCRIPT.format(saved="model.state_dict()")}, "DDP011") == [("train.py", 9)]
