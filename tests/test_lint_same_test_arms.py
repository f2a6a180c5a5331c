"""A model wrapped under `if WITH_DDP and SIZE > 1:` in a trainer and saved under the `else:` of
the same test in `main` is the plain model there (DDP019), and an evaluation DistributedSampler
that the function's loader over the same set leaves out pads nothing (DDP018). Through
`ddpcheck lint`, on a small MPI-launched graph-network trainer in the style of real code."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli

SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    try:
        from mpi4py import MPI
        WITH_DDP = True
        SIZE = MPI.COMM_WORLD.Get_size()
        RANK = MPI.COMM_WORLD.Get_rank()
        LOCAL_RANK = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    except ImportError:
        WITH_DDP = False
        SIZE = 1
        RANK = 0
        LOCAL_RANK = 0


    class Trainer:
        def __init__(self, epochs):
            self.epochs = epochs
            self.device = torch.device("cuda", LOCAL_RANK)
            self.data = self.setup_data()
            self.model = torch.nn.Linear(8, 1).to(self.device)
            if WITH_DDP and SIZE > 1:
                self.model = DDP(self.model, device_ids=[LOCAL_RANK])
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3 * SIZE)

        def setup_data(self):
            train_set = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
            test_set = TensorDataset(torch.randn(100, 8), torch.randn(100, 1))
            train_sampler = DistributedSampler(train_set, num_replicas=SIZE, rank=RANK)
            train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler)
            test_sampler = DistributedSampler(test_set, num_replicas=SIZE, rank=RANK)
            test_loader = DataLoader(test_set, batch_size=32)
            return {"train": {"sampler": train_sampler, "loader": train_loader},
                    "test": {"sampler": test_sampler, "loader": test_loader}}

        def train_epoch(self, epoch):
            self.data["train"]["sampler"].set_epoch(epoch)
            for x, y in self.data["train"]["loader"]:
                self.optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device))
                loss.backward()
                self.optimizer.step()

        def test(self):
            total = torch.zeros(2, device=self.device)
            with torch.no_grad():
                for x, y in self.data["test"]["loader"]:
                    loss = torch.nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device))
                    total += torch.stack([loss * len(x), torch.tensor(float(len(x)), device=self.device)])
            dist.all_reduce(total)
            return (total[0] / total[1]).item()


    def main():
        dist.init_process_group("nccl", rank=RANK, world_size=SIZE)
        torch.cuda.set_device(LOCAL_RANK)
        trainer = Trainer(epochs=10)
        for epoch in range(trainer.epochs):
            trainer.train_epoch(epoch)
            test_loss = trainer.test()
            if RANK == 0:
                print(f"epoch {epoch} test loss {test_loss:.4f}")
                if WITH_DDP and SIZE > 1:
                    ckpt = {"epoch": epoch, "state_dict": trainer.model.module.state_dict()}
                else:
                    ckpt = {"epoch": epoch, "state_dict": trainer.model.state_dict()}
                torch.save(ckpt, "ckpt.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _codes(tmp_path: Path, text: str) -> list[tuple[str, int]]:
    (tmp_path / "main.py").write_text(textwrap.dedent(text))
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", "DDP018,DDP019", "--output-format", "json",
                "main.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return sorted((f["code"], f["location"]["line"]) for f in json.loads(r.stdout)["findings"])


def _line(text: str, needle: str) -> int:
    return 1 + next(i for i, line in enumerate(textwrap.dedent(text).splitlines()) if needle in line)


def test_each_arm_saves_what_it_holds(tmp_path):
    assert _codes(tmp_path, SCRIPT) == []


def test_the_wrapper_saved_on_every_path_is_reported(tmp_path):
    # Without the test, the wrapper's state_dict is saved whenever the job is distributed.
    unguarded = SCRIPT.replace(
        "                if WITH_DDP and SIZE > 1:\n"
        "                    ckpt = {\"epoch\": epoch, \"state_dict\": trainer.model.module.state_dict()}\n"
        "                else:\n"
        "                    ckpt = {\"epoch\": epoch, \"state_dict\": trainer.model.state_dict()}\n",
        "                ckpt = {\"epoch\": epoch, \"state_dict\": trainer.model.state_dict()}\n")
    assert unguarded != SCRIPT
    assert _codes(tmp_path, unguarded) == [("DDP019", _line(unguarded, '"state_dict": trainer.model.state_dict()'))]


def test_an_evaluation_loader_that_takes_the_sampler_is_reported(tmp_path):
    # Handed to the test loader, the sampler pads the 100 samples and the all-reduce counts
    # the repeated ones twice.
    padded = SCRIPT.replace("test_loader = DataLoader(test_set, batch_size=32)",
                            "test_loader = DataLoader(test_set, batch_size=32, sampler=test_sampler)")
    assert padded != SCRIPT
    assert _codes(tmp_path, padded) == [("DDP018", _line(padded, "test_sampler = DistributedSampler("))]
