"""Output and checkpoint codes on mechanisms seen on public scripts of batch 23 (DDP012, DDP019,
DDP020, DDP011): each through `ddpcheck lint` on a small project written in the style of the
scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A segmentation zoo: a builder picks the network by name from a table and passes its keyword
# arguments on whole; the network builds its norm layers from the class it is given.
ZOO = {
    "nets/__init__.py": "",
    "nets/fcn.py": """\
        import torch.nn as nn


        class FCN(nn.Module):
            def __init__(self, num_class, norm_layer=nn.BatchNorm2d):
                super().__init__()
                self.conv = nn.Conv2d(3, 64, 3, padding=1)
                self.bn = norm_layer(64)
                self.head = nn.Conv2d(64, num_class, 1)

            def forward(self, x):
                return self.head(self.bn(self.conv(x)).relu())


        def get_fcn(num_class=19, **kwargs):
            return FCN(num_class, **kwargs)


        def get_fcn_small(num_class=19, **kwargs):
            return FCN(num_class, **kwargs)
    """,
    "nets/zoo.py": """\
        from .fcn import *

        __all__ = ["get_model"]


        def get_model(name, **kwargs):
            models = {"fcn": get_fcn, "fcn_small": get_fcn_small}
            return models[name](**kwargs)
    """,
}

SEG_SCRIPT = """\
    import argparse
    import torch
    import torch.nn as nn
    import torch.distributed as dist
    from nets.zoo import get_model


    class Trainer:
        def __init__(self, args):
            self.device = torch.device(f"cuda:{args.local_rank}")
            {norm}
            self.model = get_model(args.model, num_class=19, norm_layer=norm).to(self.device)
            if args.distributed:
                self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[args.local_rank])


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--distributed", action="store_true")
        parser.add_argument("--model", default="fcn")
        args = parser.parse_args()
        dist.init_process_group("nccl")
        Trainer(args)
"""


def test_network_given_syncbatchnorm_through_builders_is_silent(tmp_path: Path) -> None:
    files = {**ZOO, "train.py": SEG_SCRIPT.replace(
        "{norm}", "norm = nn.SyncBatchNorm if args.distributed else nn.BatchNorm2d")}
    assert lines(tmp_path, files, "DDP012") == []


def test_network_given_batchnorm_through_builders_is_reported(tmp_path: Path) -> None:
    files = {**ZOO, "train.py": SEG_SCRIPT.replace("{norm}", "norm = nn.BatchNorm2d")}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 14)]


# A launcher module: the worker refuses to start when the node's group is already set, then makes
# it; the function it is handed runs on every rank.
LAUNCH = {
    "dist_utils/__init__.py": "",
    "dist_utils/comm.py": """\
        import torch.distributed as dist

        NODE_GROUP = None


        def local_rank():
            return dist.get_rank(group=NODE_GROUP)
    """,
    "dist_utils/launch.py": """\
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        import dist_utils.comm as comm


        def launch(fn, gpus, url, args=()):
            if gpus > 1:
                mp.spawn(_worker, nprocs=gpus, args=(fn, gpus, url, args))
            else:
                fn(0, *args)


        def _worker(rank, fn, gpus, url, args):
            dist.init_process_group("nccl", init_method=url, world_size=gpus, rank=rank)
            if comm.NODE_GROUP is not None:
                raise ValueError("the node group is already set")
            group = dist.new_group(list(range(gpus)))
            if rank < gpus:
                comm.NODE_GROUP = group
            torch.cuda.set_device(rank)
            fn(rank, *args)
    """,
}

SOLVER_SCRIPT = """\
    import argparse
    import time
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dist_utils.launch import launch


    class Solver:
        def __init__(self, model, loader, optimizer, epochs):
            self.model, self.loader, self.optimizer, self.epochs = model, loader, optimizer, epochs

        def train_epoch(self):
            self.model.train()
            for itr, (x, y) in enumerate(self.loader):
                if itr == 0:
                    print("first batch at " + str(time.time()))
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

        def train(self):
            {loop}


    def main_worker(rank, args):
        model = DDP(torch.nn.Linear(8, 2).cuda(rank), device_ids=[rank])
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.zeros(64).long()))
        Solver(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), args.epochs).train()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpus", type=int, default=2)
        parser.add_argument("--epochs", type=int, default=10)
        args = parser.parse_args()
        launch(main_worker, args.gpus, "tcp://127.0.0.1:29500", args=(args,))
"""


def test_print_at_first_batch_of_each_epoch_is_reported(tmp_path: Path) -> None:
    """`if itr == 0:` in the batch loop of `train_epoch()`, which the epoch loop of `train()`
    calls: once per epoch on every rank (the worker's early exit on a group the module starts
    without does not hide the function it runs)."""
    files = {**LAUNCH, "train.py": SOLVER_SCRIPT.replace(
        "{loop}", "for epoch in range(self.epochs):\n                self.train_epoch()")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 16)]


def test_print_at_first_batch_of_a_single_pass_is_silent(tmp_path: Path) -> None:
    files = {**LAUNCH, "train.py": SOLVER_SCRIPT.replace("{loop}", "self.train_epoch()")}
    assert lines(tmp_path, files, "DDP020") == []
