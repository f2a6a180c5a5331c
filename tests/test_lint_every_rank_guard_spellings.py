"""Rank guards spelled as a private trainer method (`self._on_main_rank()`) and as a helper that
returns `not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0`, through
`ddpcheck lint` (DDP020): the output under them runs on one rank."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

UTIL = """\
    import torch.distributed as dist


    def first_worker():
        return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from util import first_worker


    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            for step, (x, y) in enumerate(loader):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if first_worker():
                    print(epoch, step, loss.item())


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        train(net, make_loader(), torch.optim.SGD(net.parameters(), lr=0.1), 3)
    """

TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, loader, rank):
            self.rank = rank
            self.model = DDP(model.to(rank), device_ids=[rank])
            self.loader = loader
            self.optimizer = torch.optim.Adam(self.model.parameters())

        def _on_main_rank(self):
            return self.rank == 0

        def fit(self, epochs):
            for epoch in range(epochs):
                for x, y in self.loader:
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    if self._on_main_rank():
                        print(f"epoch {epoch}: {loss.item():.4f}")


    def worker(rank, world_size, model, loader):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        Trainer(model, loader, rank).fit(10)
    """


def test_or_chain_helper_guard_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TRAIN, "util.py": UTIL})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_or_chain_without_the_rank_test_reported(tmp_path: Path) -> None:
    util = UTIL.replace(" or dist.get_rank() == 0", " or dist.get_world_size() > 0")
    write_project(tmp_path, {"train.py": TRAIN, "util.py": util})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 18, "DDP020")}


def test_private_main_rank_method_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"trainer.py": TRAINER})
    assert finding_set(tmp_path, "trainer.py", select="DDP020") == set()


def test_private_main_rank_method_answering_by_device_clean(tmp_path: Path) -> None:
    trainer = TRAINER.replace("            return self.rank == 0\n",
                              "            return torch.device(self.rank) == torch.device(\"cuda:0\")\n")
    write_project(tmp_path, {"trainer.py": trainer})
    assert finding_set(tmp_path, "trainer.py", select="DDP020") == set()


def test_unguarded_print_beside_the_method_reported(tmp_path: Path) -> None:
    trainer = TRAINER.replace("                    if self._on_main_rank():\n"
                              "                        print(", "                    print(")
    write_project(tmp_path, {"trainer.py": trainer})
    assert finding_set(tmp_path, "trainer.py", select="DDP020") == {("trainer.py", 23, "DDP020")}


ALERTING = """\
    import logging

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, loader, rank):
            self.logger = logging.getLogger("train")
            self.model = DDP(model.to(rank), device_ids=[rank])
            self.loader = loader
            self.optimizer = torch.optim.Adam(self.model.parameters())

        def alert(self, msg, level="info"):
            if level == "warning":
                self.logger.warning(msg)
            else:
                self.logger.info(msg)

        def fit(self, epochs):
            for epoch in range(epochs):
                for x, y in self.loader:
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    if torch.isnan(loss):
                        self.alert("NaN loss in this batch", level="warning")
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()


    def worker(rank, world_size, model, loader):
        logging.basicConfig(level=logging.INFO)
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        Trainer(model, loader, rank).fit(10)
    """


def test_helper_output_under_a_test_of_the_ranks_data_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"trainer.py": ALERTING})
    assert finding_set(tmp_path, "trainer.py", select="DDP020") == set()


def test_helper_output_every_step_reported(tmp_path: Path) -> None:
    every = ALERTING.replace("                    if torch.isnan(loss):\n"
                             "                        self.alert(", "                    self.alert(")
    write_project(tmp_path, {"trainer.py": every})
    assert finding_set(tmp_path, "trainer.py", select="DDP020") == {("trainer.py", 25, "DDP020")}


GRAD_NORM = """\
    import logging
    import math
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(model, loader, optimizer, clip):
        for inputs, targets in loader:
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if math.isnan(grad_norm):
                logging.warning("grad norm is NaN, skipping the update")
            else:
                optimizer.step()


    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO)
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        train(net, make_loader(), torch.optim.SGD(net.parameters(), lr=0.1), 1.0)
    """


def test_warning_on_the_averaged_gradient_norm_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": GRAD_NORM})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 17, "DDP020")}


def test_warning_on_the_ranks_own_loss_clean(tmp_path: Path) -> None:
    own = GRAD_NORM.replace("            if math.isnan(grad_norm):\n", "            if math.isnan(loss.item()):\n")
    write_project(tmp_path, {"train.py": own})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()
