"""A rank's piece of a hand split used as one batch, through `ddpcheck lint` (DDP034): every
optimizer step runs one forward over the whole piece, so pieces of different sizes still give every
rank the same number of backward passes. A piece a loop iterates (or a loader built from it) is
still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

INVERSION = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from physics import Simulator


    def invert(rank, world_size, shots, receivers, observed):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        shots = torch.chunk(shots, world_size)[rank].to(rank)
        observed = torch.chunk(observed, world_size)[rank].to(rank)
        receivers = torch.tensor_split(receivers, world_size)[rank].to(rank)
        model = DDP(Simulator().to(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for step in range(200):
            optimizer.zero_grad()
            predicted = model(shots, receivers)
            loss = torch.nn.functional.mse_loss(predicted, observed)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 20 == 0:
                print(step, loss.item())
        dist.destroy_process_group()
    """


def test_piece_used_as_one_batch_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"invert.py": INVERSION})
    assert finding_set(tmp_path, "invert.py", select="DDP034") == set()


def test_piece_iterated_by_the_training_loop_reported(tmp_path: Path) -> None:
    looped = INVERSION.replace(
        "            optimizer.zero_grad()\n"
        "            predicted = model(shots, receivers)\n"
        "            loss = torch.nn.functional.mse_loss(predicted, observed)\n",
        "            for shot, target in zip(shots, observed):\n"
        "                optimizer.zero_grad()\n"
        "                predicted = model(shot, receivers)\n"
        "                loss = torch.nn.functional.mse_loss(predicted, target)\n")
    looped = looped.replace("            loss.backward()\n            optimizer.step()\n",
                            "                loss.backward()\n                optimizer.step()\n")
    write_project(tmp_path, {"invert.py": looped})
    assert finding_set(tmp_path, "invert.py", select="DDP034") == {("invert.py", 13, "DDP034"),
                                                                   ("invert.py", 14, "DDP034")}


def test_piece_fed_to_a_loader_reported(tmp_path: Path) -> None:
    loaded = INVERSION.replace(
        "        for step in range(200):\n"
        "            optimizer.zero_grad()\n"
        "            predicted = model(shots, receivers)\n"
        "            loss = torch.nn.functional.mse_loss(predicted, observed)\n"
        "            loss.backward()\n"
        "            optimizer.step()\n"
        "            if rank == 0 and step % 20 == 0:\n"
        "                print(step, loss.item())\n",
        "        data = torch.utils.data.TensorDataset(shots, observed)\n"
        "        loader = torch.utils.data.DataLoader(data, batch_size=4)\n"
        "        for epoch in range(10):\n"
        "            for shot, target in loader:\n"
        "                optimizer.zero_grad()\n"
        "                torch.nn.functional.mse_loss(model(shot, receivers), target).backward()\n"
        "                optimizer.step()\n")
    write_project(tmp_path, {"invert.py": loaded})
    assert finding_set(tmp_path, "invert.py", select="DDP034") == {("invert.py", 13, "DDP034"),
                                                                   ("invert.py", 14, "DDP034")}


def test_piece_handed_to_a_training_function_reported(tmp_path: Path) -> None:
    handed = INVERSION.replace(
        "        for step in range(200):\n",
        "        fit(model, optimizer, shots, observed, receivers)\n"
        "        for step in range(0):\n") + """\


    def fit(model, optimizer, shots, observed, receivers):
        for shot, target in zip(shots, observed):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(shot, receivers), target).backward()
            optimizer.step()
    """
    write_project(tmp_path, {"invert.py": handed})
    assert ("invert.py", 13, "DDP034") in finding_set(tmp_path, "invert.py", select="DDP034")


def test_piece_kept_on_the_dataset_reported(tmp_path: Path) -> None:
    source = """\
        import numpy as np
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, Dataset


        class Shards(Dataset):
            def __init__(self, files):
                self.files = np.array_split(files, dist.get_world_size())[dist.get_rank()]

            def __len__(self):
                return len(self.files)

            def __getitem__(self, i):
                return torch.load(self.files[i])


        def train(model, optimizer, files):
            for batch in DataLoader(Shards(files), batch_size=8):
                optimizer.zero_grad()
                model(batch).sum().backward()
                optimizer.step()
        """
    write_project(tmp_path, {"train.py": source})
    assert finding_set(tmp_path, "train.py", select="DDP034") == {("train.py", 9, "DDP034")}


STREAM = """\
    import torch.distributed as dist
    from torch.utils.data import IterableDataset


    class LineStream(IterableDataset):
        def __init__(self, handle, encode):
            super().__init__()
            self.handle = handle
            self.encode = encode
            self.num_replicas = -1

        def __iter__(self):
            if dist.is_initialized():
                self.num_replicas = dist.get_world_size()
                self.rank = dist.get_rank()
            for i, line in enumerate(self.handle):
                if self.num_replicas != -1 and i % self.num_replicas != self.rank:
                    continue
                for record in self.encode(line, i):
                    yield record
    """

STREAM_TRAIN = """\
    import torch
    from torch.utils.data import DataLoader

    from stream import LineStream


    def train(model, optimizer, handle, encode, epochs):
        for epoch in range(epochs):
            handle.seek(0)
            for batch in DataLoader(LineStream(handle, encode), batch_size=32):
                optimizer.zero_grad()
                model(batch).loss.backward()
                optimizer.step()
    """


def test_rank_filter_of_a_streamed_dataset_reported_at_the_filter(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": STREAM_TRAIN, "stream.py": STREAM})
    assert finding_set(tmp_path, "train.py", select="DDP034") == {("stream.py", 17, "DDP034")}
