"""Mechanisms seen on public scripts of batch 19 (metrics, early stopping, frozen teachers,
seeds): each through `ddpcheck lint` on a small project written in the style of the scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return [f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select)]


# DDP029: the script imports its experiment class from a folder without `__init__.py`
# (`exp/exp_main.py`), which imports the models from a sibling folder of its own (`from models
# import PatchTST`): run from the script, that folder is on the path, and the model's dropout
# is a draw.
SEEDED_RUN = """\
    import argparse
    import random

    import numpy as np
    import torch

    from exp.exp_main import Exp_Main

    parser = argparse.ArgumentParser()
    parser.add_argument("--random_seed", type=int, default=2021)
    parser.add_argument("--model", default="PatchTST")

    if __name__ == "__main__":
        args = parser.parse_args()
        fix_seed = args.random_seed
        random.seed(fix_seed)
        torch.manual_seed(fix_seed)
        np.random.seed(fix_seed)
        torch.distributed.init_process_group("nccl")
        Exp_Main(args).train()
"""

EXP_MAIN = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from models import PatchTST


    class Exp_Main:
        def __init__(self, args):
            self.args = args

        def train(self):
            model = DDP(PatchTST.Model(self.args).cuda())
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
            for step in range(100):
                loss = model(torch.ones(8, 16).cuda()).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""

PATCHTST = """\
    from torch import nn


    class Model(nn.Module):
        def __init__(self, configs):
            super().__init__()
            self.head = nn.Linear(16, 1)
            self.dropout = nn.Dropout({p})

        def forward(self, x):
            return self.head(self.dropout(x))
"""


def test_ddp029_model_of_a_sibling_folder_imported_by_a_module_without_init(tmp_path: Path) -> None:
    files = {"run_longExp.py": SEEDED_RUN, "exp/exp_main.py": EXP_MAIN,
             "models/PatchTST.py": PATCHTST.format(p="0.3")}
    assert lines(tmp_path, files, "DDP029", "run_longExp.py") == [17]


def test_ddp029_model_of_a_sibling_folder_without_dropout_stays_clean(tmp_path: Path) -> None:
    files = {"run_longExp.py": SEEDED_RUN, "exp/exp_main.py": EXP_MAIN,
             "models/PatchTST.py": PATCHTST.replace("self.dropout = nn.Dropout({p})", "self.act = nn.ReLU()")
             .replace("self.dropout(x)", "self.act(x)")}
    assert lines(tmp_path, files, "DDP029", "run_longExp.py") == []


# DDP026: a teacher wrapped in DDP (when it has BatchNorm), then every parameter of it frozen
# with no condition: the reducer marks none of them ready and waits for none.
KD_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.utils.data import DataLoader, DistributedSampler


    def main(opt, dataset):
        dist.init_process_group("nccl")
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset), batch_size=64)
        model = nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.Linear(32, 10)).cuda()
        model_t = nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.Linear(32, 10)).cuda()
        if opt.sync_bn:
            model_t = nn.SyncBatchNorm.convert_sync_batchnorm(model_t)
            model_t = nn.parallel.DistributedDataParallel(model_t, device_ids=[opt.gpu])
        model = nn.parallel.DistributedDataParallel(model, device_ids=[opt.gpu])

        for {target} in model_t.{params}():
            {body}

        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for x, y in loader:
            with torch.no_grad():
                soft = model_t(x.cuda())
            loss = nn.functional.kl_div(model(x.cuda()).log_softmax(1), soft.softmax(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_ddp026_whole_teacher_frozen_after_its_wrap_is_clean(tmp_path: Path) -> None:
    files = {"train.py": KD_TRAIN.format(target="p", params="parameters", body="p.requires_grad = False")}
    assert lines(tmp_path, files, "DDP026") == []
    files = {"train.py": KD_TRAIN.format(target="p", params="parameters", body="p.requires_grad_(False)")}
    assert lines(tmp_path / "b", files, "DDP026") == []


def test_ddp026_part_of_the_model_frozen_after_its_wrap_is_still_reported(tmp_path: Path) -> None:
    body = "if 'head' not in name:\n                p.requires_grad = False"
    files = {"train.py": KD_TRAIN.format(target="name, p", params="named_parameters", body=body)}
    assert lines(tmp_path, files, "DDP026") == [17]


# DDP035: the early-stopping counter is updated on the answer of the trainer's own `validate`,
# which sums the rank's own losses over its shard and makes no collective.
EARLY_STOP = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model, train_set, val_set, rank):
            self.model = DDP(model.to(rank), device_ids=[rank])
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
            self.criterion = torch.nn.MSELoss()
            self.train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
            self.val_loader = DataLoader(val_set, batch_size=32, sampler=DistributedSampler(val_set))

        def train_epoch(self):
            for inputs, targets in self.train_loader:
                self.optimizer.zero_grad()
                loss = self.criterion(self.model(inputs), targets)
                loss.backward()
                self.optimizer.step()

        def validate(self):
            total_loss = 0.0
            num_batches = 0
            with torch.no_grad():
                for inputs, targets in self.val_loader:
                    loss = self.criterion(self.model(inputs), targets)
                    total_loss += loss.item()
                    num_batches += 1
            {reduce}return total_loss / num_batches

        def train(self, epochs, patience):
            best_val_loss = float("inf")
            patience_counter = 0
            for epoch in range(epochs):
                self.train_epoch()
                val_loss = self.validate()
                if val_loss < best_val_loss:
                    best_val_loss = val_loss
                    patience_counter = 0
                else:
                    patience_counter += 1
                if patience_counter >= patience:
                    print(f"Early stopping after {{epoch + 1}} epochs")
                    break
"""


def test_ddp035_early_stopping_on_a_validate_method_summing_the_rank_s_own_losses(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": EARLY_STOP.format(reduce="")}, "DDP035") == [45]


def test_ddp035_early_stopping_on_a_validate_method_that_reduces_is_clean(tmp_path: Path) -> None:
    reduce = ("stats = torch.tensor([total_loss, num_batches])\n"
              "            dist.all_reduce(stats)\n"
              "            total_loss, num_batches = stats.tolist()\n            ")
    assert lines(tmp_path, {"train.py": EARLY_STOP.format(reduce=reduce)}, "DDP035") == []


# DDP036: one `run_epoch(mode, iter_bar)` for training and validation; the epoch's sums live in a
# dict a helper method adds to, and the caller hands the validation figures to a method that
# prints them.
RUN_EPOCH = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from tqdm import tqdm


    class Trainer:
        def __init__(self, model, train_set, val_set, rank, metrics):
            self.rank = rank
            self.metrics = metrics
            self.train_sampler = DistributedSampler(train_set)
            self.val_sampler = DistributedSampler(val_set)
            self.train_dataloader = DataLoader(train_set, batch_size=32, sampler=self.train_sampler)
            self.val_dataloader = DataLoader(val_set, batch_size=32, sampler=self.val_sampler)
            self.model = DDP(model.to(rank), device_ids=[rank])
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

        def train(self, epochs):
            for epoch in range(epochs):
                self.train_sampler.set_epoch(epoch)
                self.run_epoch("train", self.train_dataloader)
                with torch.no_grad():
                    val_iter_bar = tqdm(self.val_dataloader) if self.rank == 0 else self.val_dataloader
                    val_epoch_metrics = self.run_epoch("val", val_iter_bar)
                if self.rank == 0:
                    self.print_metrics(val_epoch_metrics)
                dist.barrier()

        def run_epoch(self, mode, iter_bar):
            epoch_metrics = self.initialize_metrics_for_epoch()
            for i, batch in enumerate(iter_bar):
                predictions = self.model(batch)
                if mode == "train":
                    loss = predictions.mean()
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                minibatch_metrics, epoch_metrics = self.aggregate_metrics(epoch_metrics, predictions, batch)
            return epoch_metrics

        def initialize_metrics_for_epoch(self):
            epoch_metrics = {"minibatch_count": 0}
            for metric in self.metrics:
                epoch_metrics[str(metric)] = 0
            return epoch_metrics

        def aggregate_metrics(self, epoch_metrics, predictions, batch):
            minibatch_metrics = {}
            for metric in self.metrics:
                minibatch_metrics[str(metric)] = metric(predictions, batch).item()
            epoch_metrics["minibatch_count"] += 1
            for metric in self.metrics:
                epoch_metrics[str(metric)] += {added}
            return minibatch_metrics, epoch_metrics

        def print_metrics(self, epoch_metrics):
            for metric in self.metrics:
                value = epoch_metrics[str(metric)] / epoch_metrics["minibatch_count"]
                print(str(metric) + ":", format(value, ".2f"))
"""


def test_ddp036_sums_kept_by_a_helper_method_and_printed_by_another(tmp_path: Path) -> None:
    files = {"train.py": RUN_EPOCH.replace("{added}", 'minibatch_metrics[str(metric)]')}
    assert lines(tmp_path, files, "DDP036") == [27]


def test_ddp036_sums_a_helper_method_adds_after_reducing_are_clean(tmp_path: Path) -> None:
    added = 'reduce_value(minibatch_metrics[str(metric)])'
    files = {"train.py": RUN_EPOCH.replace("{added}", added) + """

    def reduce_value(value):
        t = torch.tensor(value)
        dist.all_reduce(t)
        return t.item() / dist.get_world_size()
"""}
    assert lines(tmp_path, files, "DDP036") == []


# DDP036: the script hands each rank its slice of the arrays by hand; the model's `fit` walks
# them in batches by hand and prints the loss and AUC `eval_by_batch` computes over them.
SLICED_MAIN = """\
    import os

    import numpy as np
    import torch

    from model import DeepFMs

    world_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    torch.distributed.init_process_group(backend="nccl", world_size=world_size, rank=rank)
    Xi_all = np.load("Xi_train.npy")
    y_all = np.load("y_train.npy")
    Xi_valid = np.load("Xi_valid.npy")
    y_valid = np.load("y_valid.npy")
    local_num = int(len(Xi_all) / world_size)
    model = DeepFMs.DeepFMs(field_size=39).cuda()
    model.fit({xi}, {y}, Xi_valid, y_valid, rank=rank)
"""

DEEPFMS = """\
    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.metrics import roc_auc_score
    from torch.nn.parallel import DistributedDataParallel as DDP


    class DeepFMs(torch.nn.Module):
        def __init__(self, field_size, batch_size=2048):
            super().__init__()
            self.batch_size = batch_size
            self.linear = torch.nn.Linear(field_size, 1)

        def forward(self, xi):
            return self.linear(xi).squeeze(1)

        def fit(self, Xi_train, y_train, Xi_valid, y_valid, rank=0):
            Xi_train = Xi_train.reshape((-1, 39))
            x_size = Xi_train.shape[0]
            model = DDP(self.train())
            optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
            for epoch in range(10):
                for i in range(x_size // self.batch_size):
                    offset = i * self.batch_size
                    outputs = model(torch.FloatTensor(Xi_train[offset:offset + self.batch_size]).cuda())
                    loss = F.binary_cross_entropy_with_logits(
                        outputs, torch.FloatTensor(y_train[offset:offset + self.batch_size]).cuda())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                train_loss, train_eval = self.eval_by_batch(Xi_train, y_train, x_size)
                print("Training [%d] loss: %.6f metric: %.6f" % (epoch + 1, train_loss, train_eval))
                valid_loss, valid_eval = self.eval_by_batch(Xi_valid, y_valid, len(Xi_valid))
                print("Validation [%d] loss: %.6f metric: %.6f" % (epoch + 1, valid_loss, valid_eval))
                permute_idx = np.random.permutation(x_size)
                Xi_train = Xi_train[permute_idx]
                y_train = y_train[permute_idx]

        def eval_by_batch(self, Xi, y, x_size):
            total_loss = 0.0
            y_pred = []
            batch_size = 8192
            model = self.eval()
            for i in range(x_size // batch_size + 1):
                offset = i * batch_size
                end = min(x_size, offset + batch_size)
                outputs = model(torch.FloatTensor(Xi[offset:end]).cuda())
                y_pred.extend(torch.sigmoid(outputs).cpu().data.numpy())
                loss = F.binary_cross_entropy_with_logits(outputs, torch.FloatTensor(y[offset:end]).cuda())
                total_loss += loss.data.item() * (end - offset)
            return total_loss / x_size, roc_auc_score(y, y_pred)
"""


def test_ddp036_arrays_sliced_by_rank_and_walked_by_hand_in_batches(tmp_path: Path) -> None:
    files = {"main.py": SLICED_MAIN.format(xi="Xi_all[rank * local_num:(rank + 1) * local_num]",
                                           y="y_all[rank * local_num:(rank + 1) * local_num]"),
             "model/DeepFMs.py": DEEPFMS}
    found = [(Path(f["path"]).name, f["location"]["line"])
             for f in lint_project(tmp_path, files, "main.py", select="DDP036")]
    assert found == [("DeepFMs.py", 32)]


def test_ddp036_whole_arrays_walked_by_hand_in_batches_are_clean(tmp_path: Path) -> None:
    files = {"main.py": SLICED_MAIN.format(xi="Xi_all", y="y_all"), "model/DeepFMs.py": DEEPFMS}
    assert lines(tmp_path, files, "DDP036", "main.py") == []
