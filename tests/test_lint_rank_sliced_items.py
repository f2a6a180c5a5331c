"""Items split among the ranks by a strided slice of a list (`shots[rank::world_size]`), then
made into datasets and loaders: the training split gives the ranks different numbers of batches
(DDP034, not the validation split beside it, and a GPU count divided by the world size is no
truncation of the data), and the validation loss summed over the rank's own items is one
rank's figure (DDP036, also when it is stored in an array of per-epoch losses before the
print). Through `ddpcheck lint` on a small script in the style of a physics training script,
with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


SCRIPT = """\
    import argparse
    import random
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from shots.datasets import ShotDataset


    def run(local_rank, local_world_size, shot_list, num_train, num_valid, epochs):
        n_gpus = torch.cuda.device_count() // local_world_size
        device_ids = list(range(local_rank * n_gpus, (local_rank + 1) * n_gpus))
        random.shuffle(shot_list)
        shots_train_world = shot_list[:num_train]
        shots_valid_world = shot_list[num_train:num_train + num_valid]
        {cut}
        shots_train_rank = shots_train_world[local_rank::local_world_size]
        shots_valid_rank = shots_valid_world[local_rank::local_world_size]
        loader_train = DataLoader(ShotDataset(shots_train_rank), batch_size=16)
        loader_valid = DataLoader(ShotDataset(shots_valid_rank), batch_size=16)
        model = DDP(torch.nn.LSTM(8, 8).to(device_ids[0]), device_ids=device_ids)
        optimizer = torch.optim.Adam(model.parameters())
        losses_valid = np.zeros(epochs)
        for epoch in range(epochs):
            for inputs, target in loader_train:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(inputs[:-1])[0], target)
                loss.backward()
                optimizer.step()
            loss_valid = 0.0
            with torch.no_grad():
                for inputs, target in loader_valid:
                    loss_valid += torch.nn.functional.mse_loss(model(inputs[:-1])[0], target).item()
            {reduce}
            losses_valid[epoch] = loss_valid / len(loader_valid)
            print(f"epoch {epoch}: valid loss {losses_valid[epoch]:8.6e}")


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--local_world_size", type=int, default=1)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        run(args.local_rank, args.local_world_size, list(range(500)), 400, 100, 10)
        dist.destroy_process_group()
"""


def _script(cut: str = "", reduce: str = "") -> dict[str, str]:
    text = SCRIPT.replace("{cut}", cut or "pass").replace("{reduce}", reduce or "pass")
    return {"train.py": text, "shots/__init__.py": "", "shots/datasets.py": "class ShotDataset:\n    pass\n"}


def test_training_split_is_reported_and_not_the_validation_split(tmp_path: Path) -> None:
    assert lines(tmp_path, _script(), "DDP034") == [("train.py", 18)]


def test_split_truncated_to_a_multiple_of_the_world_size_is_clean(tmp_path: Path) -> None:
    cut = ("per = len(shots_train_world) // local_world_size; "
           "shots_train_world = shots_train_world[:per * local_world_size]")
    assert lines(tmp_path, _script(cut=cut), "DDP034") == []


def test_validation_loss_over_the_rank_items_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, _script(), "DDP036") == [("train.py", 37)]


def test_validation_loss_reduced_before_the_print_is_clean(tmp_path: Path) -> None:
    reduce = ("t = torch.tensor([loss_valid], device=device_ids[0]); dist.all_reduce(t); "
              "loss_valid = t.item() / dist.get_world_size()")
    assert lines(tmp_path, _script(reduce=reduce), "DDP036") == []


VALIDATION_METHOD = """\
    import torch
    import torch.distributed as dist
    from shots.datasets import ShotDataset


    class Trainer:
        def __init__(self, network, keys, local_rank):
            self.network = network
            self.keys = keys
            self.local_rank = local_rank

        def train_step(self, batch):
            loss = self.network(batch).mean()
            loss.backward()

        def validate(self):
            val_keys = self.keys[self.local_rank::dist.get_world_size()]
            dataset_val = ShotDataset(val_keys)
            with torch.no_grad():
                for case in dataset_val:
                    print(self.network(case).argmax())
"""


def test_keys_split_by_an_evaluation_method_are_clean(tmp_path: Path) -> None:
    files = {"train.py": VALIDATION_METHOD, "shots/__init__.py": "", "shots/datasets.py": "class ShotDataset:\n    pass\n"}
    assert lines(tmp_path, files, "DDP034") == []


# A trainer class whose final validation splits the case keys among the ranks and makes a barrier
# every few cases, only up to the number of cases every rank has.
TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, network, keys, local_rank):
            self.local_rank = local_rank
            self.keys = keys
            self.network = DDP(network)
            self.optimizer = torch.optim.SGD(self.network.parameters(), lr=0.01)

        def train_step(self, batch):
            self.optimizer.zero_grad()
            self.network(batch).sum().backward()
            self.optimizer.step()

        def validate(self):
            val_keys = self.keys
            last_barrier_at_idx = len(val_keys) // dist.get_world_size() - 1
            val_keys = val_keys[self.local_rank::dist.get_world_size()]
            for i, key in enumerate(val_keys):
                with torch.no_grad():
                    self.network.module(torch.load(key))
                if {guard}(i + 1) % 20 == 0:
                    dist.barrier()
"""


def test_a_split_whose_collectives_stop_at_the_common_count_is_clean(tmp_path: Path) -> None:
    files = {"trainer.py": TRAINER.replace("{guard}", "i < last_barrier_at_idx and ")}
    assert lines(tmp_path, files, "DDP034", target="trainer.py") == []


def test_a_split_with_a_barrier_on_every_rank_share_is_reported(tmp_path: Path) -> None:
    files = {"trainer.py": TRAINER.replace("{guard}", "")}
    assert lines(tmp_path, files, "DDP034", target="trainer.py") == [("trainer.py", 21)]
