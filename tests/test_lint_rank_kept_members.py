"""An early-stopping object kept by one rank, read through its attribute (`if stopper.early_stop:
break`), through `ddpcheck lint` (DDP035): the object's method returns early on every rank but
one (`if self.device is not None and self.device != 0: return`), the rank handed in by a base
class of the trainer in another module, and a metric all_gather elsewhere in the loop that carries
nothing into the flag. Each test writes a small project in the style of real training code."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli


def _findings(root: Path, files: dict[str, str]) -> set[tuple[str, int]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    first = next(iter(files))
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", "DDP035", "--output-format", "json",
                str(root / first), cwd=root)
    assert r.returncode == 0, r.stderr
    return {(Path(f["path"]).as_posix().split("/")[-1], f["location"]["line"])
            for f in json.loads(r.stdout)["findings"]}


STOPPER = """\
    class EarlyStopping:
        def __init__(self, patience=3, device=None):
            self.patience = patience
            self.counter = 0
            self.best = None
            self.early_stop = False
            self.device = device

        def __call__(self, score):
            if self.device is not None and self.device != 0:
                return
            if self.best is None or score > self.best:
                self.best = score
                self.counter = 0
            else:
                self.counter += 1
                if self.counter >= self.patience:
                    self.early_stop = True
"""

BASE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class ExpBasic:
        def __init__(self, args):
            self.args = args
            self.device = self._acquire_device()
            self.model = self._build_model()

        def _acquire_device(self):
            if self.args.use_gpu:
                device = int(os.environ["LOCAL_RANK"])
            else:
                device = torch.device("cpu")
            return device

        def _build_model(self):
            net = torch.nn.Linear(8, 2).to(self.device)
            return DDP(net, device_ids=[self.device])
"""

TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from exp.basic import ExpBasic
    from utils.tools import EarlyStopping


    class ExpClassification(ExpBasic):
        def vali(self, loader):
            preds = []
            with torch.no_grad():
                for x, y in loader:
                    preds.append(self.model(x.to(self.device)).argmax(1))
            pred = torch.cat(preds)
            gathered = [torch.zeros_like(pred) for _ in range(dist.get_world_size())]
            dist.all_gather(gathered, pred)
            return float(torch.cat(gathered).float().mean())

        def train(self):
            ds = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
            sampler = DistributedSampler(ds)
            loader = DataLoader(ds, batch_size=16, sampler=sampler)
            optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
            early_stopping = EarlyStopping(patience=self.args.patience, device=self.device)
            for epoch in range(self.args.epochs):
                sampler.set_epoch(epoch)
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = torch.nn.functional.cross_entropy(self.model(x.to(self.device)), y.to(self.device))
                    loss.backward()
                    optimizer.step()
                early_stopping(self.vali(loader))
                if early_stopping.early_stop:
                    break
"""

RUN = """\
    import argparse

    import torch.distributed as dist

    from exp.classification import ExpClassification


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--use_gpu", type=bool, default=True)
        parser.add_argument("--patience", type=int, default=3)
        parser.add_argument("--epochs", type=int, default=100)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        ExpClassification(args).train()
        dist.destroy_process_group()
"""


def _project(stopper: str = STOPPER, trainer: str = TRAINER) -> dict[str, str]:
    return {"exp/classification.py": trainer, "exp/__init__.py": "", "exp/basic.py": BASE,
            "utils/__init__.py": "", "utils/tools.py": stopper, "run.py": RUN}


BREAK_LINE = 1 + [line.strip() for line in TRAINER.splitlines()].index("break")


def test_a_flag_one_rank_keeps_ends_its_loop_alone(tmp_path):
    # Rank 0 alone counts the stale epochs; the other ranks return first. The all_gather of the
    # predictions in `vali` carries nothing into `early_stop`.
    assert _findings(tmp_path, _project()) == {("classification.py", BREAK_LINE)}


def test_the_rank_test_written_with_a_presence_check_first(tmp_path):
    # `self.device != 0` alone reads the same.
    plain = STOPPER.replace("if self.device is not None and self.device != 0:", "if self.device != 0:")
    assert _findings(tmp_path, _project(stopper=plain)) == {("classification.py", BREAK_LINE)}


def test_a_flag_every_rank_keeps_is_not_reported(tmp_path):
    # Every rank judges the gathered (identical) metric: every rank leaves at the same epoch.
    everywhere = STOPPER.replace("            if self.device is not None and self.device != 0:\n"
                                 "                return\n", "")
    assert everywhere != STOPPER
    assert _findings(tmp_path, _project(stopper=everywhere)) == set()


def test_a_flag_the_object_broadcasts_is_not_reported(tmp_path):
    # The object hands rank 0's answer to every rank itself.
    shared = STOPPER.replace(
        "class EarlyStopping:",
        "import torch\nimport torch.distributed as dist\n\n\nclass EarlyStopping:",
    ).replace(
        "                    self.early_stop = True\n",
        "                    self.early_stop = True\n\n"
        "        def sync(self):\n"
        "            flag = torch.tensor([int(self.early_stop)])\n"
        "            dist.broadcast(flag, src=0)\n"
        "            self.early_stop = bool(flag.item())\n",
    )
    assert "broadcast" in shared
    trainer = TRAINER.replace("early_stopping(self.vali(loader))\n",
                              "early_stopping(self.vali(loader))\n                early_stopping.sync()\n")
    assert _findings(tmp_path, _project(stopper=shared, trainer=trainer)) == set()


def test_a_flag_the_loop_sets_from_a_collective_is_not_reported(tmp_path):
    # The loop writes the member from a broadcast before testing it.
    trainer = TRAINER.replace(
        "                early_stopping(self.vali(loader))\n",
        "                early_stopping(self.vali(loader))\n"
        "                flag = torch.tensor([int(early_stopping.early_stop)])\n"
        "                dist.broadcast(flag, src=0)\n"
        "                early_stopping.early_stop = bool(flag.item())\n",
    )
    assert _findings(tmp_path, _project(trainer=trainer)) == set()


SPAWNED = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def train_one_epoch(model, loader, optimizer, sampler, epoch):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            optimizer.step()


    def main_worker(rank, world_size, max_epoch):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        ds = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=16, sampler=sampler)
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        epoch = 1
        while True:
            train_one_epoch(model, loader, optimizer, sampler, epoch)
            if rank == 0:
                torch.save(model.module.state_dict(), "model_%04d.pt" % epoch)
                if epoch >= max_epoch:
                    dist.destroy_process_group()
                    quit()
            epoch += 1


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(main_worker, args=(world_size, 80), nprocs=world_size)
"""


def test_a_clean_exit_one_rank_takes_ends_it_alone(tmp_path):
    # Rank 0 quits at the last epoch; the others start another epoch and wait in its backward.
    line = 1 + [s.strip() for s in SPAWNED.splitlines()].index("quit()")
    assert _findings(tmp_path, {"train.py": SPAWNED}) == {("train.py", line)}


def test_a_clean_exit_every_rank_takes_is_not_reported(tmp_path):
    every = SPAWNED.replace(
        "                if epoch >= max_epoch:\n"
        "                    dist.destroy_process_group()\n"
        "                    quit()\n",
        "").replace("            epoch += 1\n",
                    "            if epoch >= max_epoch:\n"
                    "                dist.destroy_process_group()\n"
                    "                quit()\n"
                    "            epoch += 1\n")
    assert every.count("quit()") == 1 and every != SPAWNED
    assert _findings(tmp_path, {"train.py": every}) == set()


SOLVER = """\
    import sys

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    class Solver:
        def set_gpu(self, gpu, world_size):
            self.gpu = gpu
            dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=world_size)
            torch.cuda.set_device(gpu)
            ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
            self.sampler = DistributedSampler(ds)
            self.loader = DataLoader(ds, batch_size=16, sampler=self.sampler)
            self.model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[gpu])
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
            self.best = float("inf")
            self.bad_epochs = 0
            self.stop = False

        def train(self, epoch):
            self.sampler.set_epoch(epoch)
            for x, y in self.loader:
                loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

        def validate(self):
            loss = torch.zeros(1, device="cuda")
            with torch.no_grad():
                for x, y in self.loader:
                    loss += torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
            dist.all_reduce(loss)
            if self.gpu == 0:
                if loss.item() < self.best:
                    self.best, self.bad_epochs = loss.item(), 0
                else:
                    self.bad_epochs += 1
                self.stop = self.bad_epochs >= 5


    def worker(gpu, solver, world_size):
        solver.set_gpu(gpu, world_size)
        for epoch in range(100):
            solver.train(epoch)
            solver.validate()
            if solver.stop == True:
                print("Apply Early Stopping")
                sys.exit()
        dist.destroy_process_group()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(worker, nprocs=n, args=(Solver(), n))
"""


def test_a_clean_exit_on_a_flag_one_rank_sets_ends_it_alone(tmp_path):
    # The validation all-reduces the loss, then rank 0 alone decides: the reduce carries nothing
    # into `stop`, and rank 0 exits while the others train on.
    line = 1 + [s.strip() for s in SOLVER.splitlines()].index("sys.exit()")
    assert _findings(tmp_path, {"train.py": SOLVER}) == {("train.py", line)}


def test_a_flag_the_solver_hands_to_every_rank_is_not_reported(tmp_path):
    shared = SOLVER.replace(
        "                self.stop = self.bad_epochs >= 5\n",
        "                self.stop = self.bad_epochs >= 5\n"
        "            flag = torch.tensor([int(self.stop)], device=\"cuda\")\n"
        "            dist.broadcast(flag, src=0)\n"
        "            self.stop = bool(flag.item())\n")
    assert shared != SOLVER
    assert _findings(tmp_path, {"train.py": shared}) == set()
