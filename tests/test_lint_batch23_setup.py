"""The model's reading of how a script sets itself up, on mechanisms seen on public scripts of
batch 23: a DataParallel/DDP `if`/`elif` on a per-process GPU count (DDP013), a global rank
shifted by a constant or composed from the node's number and LOCAL_RANK read in place (DDP007),
and a learning rate written by a set-up helper on an `args` object imported from another module
of the project (DDP004). Each through `ddpcheck lint` on a small project written in the style of
such scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# --- DDP013: DataParallel when a process sees several GPUs, else DDP under the launcher --------
HF_TEMPLATE = """\
    import os
    import torch
    from torch.nn import DataParallel
    from torch.nn.parallel import DistributedDataParallel


    def train(args, model, loader):
        {keep}
        model = model.to(args.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        if args.n_gpu > 1:
            model = DataParallel(model)
        elif args.local_rank != -1:
            model = DistributedDataParallel(model, device_ids=[args.local_rank], output_device=args.local_rank)
        for epoch in range(int(args.num_train_epochs)):
            for step, (x, y) in enumerate(loader):
                model.train()
                outputs = {forward}(x)
                loss = torch.nn.functional.mse_loss(outputs, y)
                loss.backward()
                optimizer.step()
                model.zero_grad()


    def main(args, model, loader):
        args.local_rank = int(os.environ.get("LOCAL_RANK", "-1"))
        if args.local_rank == -1:
            args.n_gpu = torch.cuda.device_count()
            args.device = torch.device("cuda")
        else:
            torch.cuda.set_device(args.local_rank)
            args.device = torch.device("cuda", args.local_rank)
            torch.distributed.init_process_group(backend="nccl")
            args.n_gpu = 1
        train(args, model, loader)
"""


def test_forward_through_a_ddp_wrap_in_the_elif_of_a_gpu_count_test_is_clean(tmp_path: Path) -> None:
    # `args.n_gpu > 1` counts one process's GPUs (DataParallel), not the ranks: the DDP made in
    # the `elif` is what `model` holds under the launcher.
    files = {"train.py": HF_TEMPLATE.format(keep="pass", forward="model")}
    assert lines(tmp_path, files, "DDP013") == []


def test_inner_module_trained_beside_that_wrap_is_reported(tmp_path: Path) -> None:
    files = {"train.py": HF_TEMPLATE.format(keep="net = model.to(args.device)", forward="net")}
    assert lines(tmp_path, files, "DDP013") == [("train.py", 18)]


# --- DDP007: the global rank shifted by a constant, or composed by hand -----------------------
SHIFTED = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def evaluate_on_cpu():
        print("rank 0 evaluates checkpoints on the CPU")


    def train_on_gpu(rank, world_size):
        store = dist.FileStore("/tmp/store", world_size)
        dist.init_process_group(backend="gloo", store=store, rank=rank, world_size=world_size)
        gpu_index = {index}
        device = torch.device(f"cuda:{{gpu_index}}")
        torch.cuda.set_device(device)
        model = DDP(torch.nn.Linear(8, 2).to(device), device_ids=[device])
        dist.destroy_process_group()


    def main():
        rank = int(os.environ["RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
        if rank == 0:
            evaluate_on_cpu()
        else:
            train_on_gpu(rank=rank, world_size=world_size)


    if __name__ == "__main__":
        main()
"""


def test_global_rank_minus_one_as_the_gpu_is_reported(tmp_path: Path) -> None:
    files = {"train.py": SHIFTED.format(index="rank - 1")}
    assert lines(tmp_path, files, "DDP007") == [("train.py", 14)]


def test_local_rank_minus_one_as_the_gpu_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SHIFTED.format(index='int(os.environ["LOCAL_RANK"]) - 1')}
    assert lines(tmp_path, files, "DDP007") == []


def test_global_rank_minus_the_node_offset_is_clean(tmp_path: Path) -> None:
    # A local rank computed by hand: the shift is no constant.
    files = {"train.py": SHIFTED.format(index='rank - int(os.environ["GROUP_RANK"]) * torch.cuda.device_count()')}
    assert lines(tmp_path, files, "DDP007") == []


COMPOSED = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        device = torch.device(f"cuda:{{{device}}}")
        torch.cuda.set_device(device)
        model = DDP(torch.nn.Linear(8, 2).to(device), device_ids=[{device}])
        dist.destroy_process_group()


    if __name__ == "__main__":
        gpus_per_node = torch.cuda.device_count()
        node_rank = int(os.environ["NODE_RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
        rank = node_rank * gpus_per_node + int(os.environ["LOCAL_RANK"])
        train(rank, world_size)
"""


def test_rank_composed_from_the_node_and_local_rank_read_in_place_is_reported(tmp_path: Path) -> None:
    files = {"train.py": COMPOSED.format(device="rank")}
    assert lines(tmp_path, files, "DDP007") == [("train.py", 9)]


def test_local_rank_as_the_gpu_beside_a_composed_rank_is_clean(tmp_path: Path) -> None:
    files = {"train.py": COMPOSED.format(device='int(os.environ["LOCAL_RANK"])')}
    assert lines(tmp_path, files, "DDP007") == []


# --- DDP004: a rate a set-up helper writes on an `args` imported from another module ----------
TEMPLATE = """\
    import torch


    def set_template(args):
        torch.distributed.init_process_group(backend="nccl", init_method="env://")
        args.local_rank = int(__import__("os").environ["LOCAL_RANK"])
        torch.cuda.set_device(args.local_rank)
        args.device = torch.device("cuda", args.local_rank)
        args.train_batch_size = 4
        {lr}
        args.num_epochs = 20
        return args
"""

ARGS_MODULE = """\
    import argparse
    from template import set_template

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    args = set_template(args)
"""

TRAINER = """\
    import torch
    from torch import nn


    class Trainer:
        def __init__(self, args, loader):
            self.args = args
            self.loader = loader
            self.model = nn.Linear(8, 2).to(args.device)
            self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[args.local_rank])
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.lr)

        def train(self):
            for epoch in range(self.args.num_epochs):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    loss = nn.functional.mse_loss(self.model(x), y)
                    loss.backward()
                    self.optimizer.step()
"""

MAIN = """\
    from torch.utils.data import DataLoader, DistributedSampler
    from setup_args import args
    from trainer import Trainer


    def train(args):
        data = list(range(64))
        loader = DataLoader(data, batch_size=args.train_batch_size, sampler=DistributedSampler(data))
        Trainer(args, loader).train()


    if __name__ == "__main__":
        train(args)
"""


def test_rate_overwritten_by_a_literal_in_a_set_up_helper_of_an_imported_args_is_reported(tmp_path: Path) -> None:
    files = {"template.py": TEMPLATE.format(lr="args.lr = 0.00001"), "setup_args.py": ARGS_MODULE,
             "trainer.py": TRAINER, "train.py": MAIN}
    assert lines(tmp_path, files, "DDP004") == [("trainer.py", 11)]


def test_rate_left_to_the_flag_by_the_set_up_helper_is_clean(tmp_path: Path) -> None:
    files = {"template.py": TEMPLATE.format(lr="pass"), "setup_args.py": ARGS_MODULE,
             "trainer.py": TRAINER, "train.py": MAIN}
    assert lines(tmp_path, files, "DDP004") == []


def test_rate_read_in_a_function_from_an_imported_args_is_reported(tmp_path: Path) -> None:
    # The function reads the module's imported global itself, not a parameter.
    main = MAIN.replace("def train(args):", "def train():").replace("train(args)\n", "train()\n")
    files = {"template.py": TEMPLATE.format(lr="args.lr = 0.00001"), "setup_args.py": ARGS_MODULE,
             "trainer.py": TRAINER.replace("lr=args.lr", "lr=imported.lr").replace(
                 "import torch\n", "import torch\n    from setup_args import args as imported\n", 1),
             "train.py": main}
    assert lines(tmp_path, files, "DDP004") == [("trainer.py", 12)]


# --- DDP001: a project sampler that splits by its `rank=`, given the local rank ----------------
BATCHER = """\
    import random
    from torch.utils.data import Sampler


    class DistTaskBatchSampler(Sampler):
        def __init__(self, datasets, batch_size, rank=0, world_size=1):
            self.rank = rank
            self.world_size = world_size
            self._batches = []
            for dataset in datasets:
                index = list(range(len(dataset)))
                self._batches += [index[i:i + batch_size] for i in range(0, len(index), batch_size)]
            random.shuffle(self._batches)

        def __len__(self):
            return len(self._batches)

        def __iter__(self):
            for batch in self._batches:
                chunk = len(batch) // self.world_size
                yield batch[self.rank * chunk:(self.rank + 1) * chunk]
"""

SAMPLER_SCRIPT = """\
    import argparse
    import os
    import torch
    from torch.utils.data import DataLoader, ConcatDataset
    from batcher import DistTaskBatchSampler


    def initialize_distributed(args):
        args.rank = int(os.getenv("RANK", "0"))
        args.world_size = int(os.getenv("WORLD_SIZE", "1"))
        if os.getenv("OMPI_COMM_WORLD_LOCAL_RANK"):
            args.local_rank = int(os.getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
            args.rank = int(os.getenv("NODE_ID", "0")) * int(os.getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) + args.local_rank
        torch.cuda.set_device(args.local_rank)
        torch.distributed.init_process_group(backend="nccl", world_size=args.world_size, rank=args.rank)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        parser.add_argument("--num_nodes", type=int, default=1)
        args = parser.parse_args()
        initialize_distributed(args)
        datasets = [list(range(100)), list(range(50))]
        sampler = DistTaskBatchSampler(datasets, 8, rank={rank}, world_size=args.world_size)
        loader = DataLoader(ConcatDataset(datasets), batch_sampler=sampler)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1).cuda(), device_ids=[args.local_rank])
        for epoch in range(3):
            for batch in loader:
                model(batch.float().cuda()).sum().backward()


    if __name__ == "__main__":
        main()
"""


def test_project_sampler_splitting_by_a_local_rank_is_reported(tmp_path: Path) -> None:
    files = {"batcher.py": BATCHER, "train.py": SAMPLER_SCRIPT.format(rank="args.local_rank")}
    assert lines(tmp_path, files, "DDP001") == [("train.py", 25)]


def test_project_sampler_splitting_by_the_global_rank_is_clean(tmp_path: Path) -> None:
    files = {"batcher.py": BATCHER, "train.py": SAMPLER_SCRIPT.format(rank="args.rank")}
    assert lines(tmp_path, files, "DDP001") == []


def test_project_sampler_given_a_rank_it_does_not_split_by_is_clean(tmp_path: Path) -> None:
    # The class takes `rank` only to seed its shuffle and keeps no `self.rank` to split by: a
    # project batch sampler decides the shards, and no local rank picks one here.
    batcher = BATCHER.replace("yield batch[self.rank * chunk:(self.rank + 1) * chunk]", "yield batch") \
        .replace("self.rank = rank", "random.seed(rank)")
    files = {"batcher.py": batcher, "train.py": SAMPLER_SCRIPT.format(rank="args.local_rank")}
    assert lines(tmp_path, files, "DDP001") == []


# --- DDP015: a world size written as a number in code, passed through an attribute ------------
WORLD_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist


    def main(args):
        {world}
        if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group(backend="nccl", init_method="env://", world_size=args.world_size,
                                    rank=int(os.environ["RANK"]))
            torch.cuda.set_device(local_rank)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--world_size", type=int, default=2)
        main(parser.parse_args())
"""


def test_world_size_set_to_a_number_in_code_before_init_is_reported(tmp_path: Path) -> None:
    files = {"train.py": WORLD_SCRIPT.format(world="args.world_size = 4  # total GPUs")}
    assert lines(tmp_path, files, "DDP015") == [("train.py", 11)]


def test_world_size_left_to_the_flag_is_clean(tmp_path: Path) -> None:
    files = {"train.py": WORLD_SCRIPT.format(world="pass")}
    assert lines(tmp_path, files, "DDP015") == []
