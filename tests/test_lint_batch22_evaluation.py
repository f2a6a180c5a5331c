"""Evaluation over rank shards, on mechanisms seen on public scripts of batch 22: per-rank test
metrics gathered and averaged beside a string cut to a literal length (DDP018), per-batch loss
dicts averaged by a project helper and logged from one shard (DDP036), and Hugging Face's
`split_dataset_by_node` feeding a training loop (DDP034). Each through `ddpcheck lint` on a small
project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A runner that evaluates every epoch over a DistributedSampler shard of the test set, gathers
# each rank's loss and accuracy with all_gather_object and averages them; the epoch's time is
# printed with its fraction cut to two characters.
GATHERED_SCRIPT = """\
    import os
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    class Runner:
        def __init__(self, model, device):
            self.model = DDP(model.to(device), device_ids=[device])
            self.optim = torch.optim.Adam(self.model.parameters(), lr=1e-4)
            self.world_size = dist.get_world_size()
            self.device = device

        def run(self, train_sampler, train_loader, test_loader, epochs):
            for epoch in range(epochs):
                start = time.time()
                train_sampler.set_epoch(epoch)
                train_loss, train_acc = self.iterate(train_loader, train=True)
                test_loss, test_acc = self.iterate(test_loader, train=False)
                metrics = {"train_loss": [], "test_loss": [], "test_acc": []}
                for key in metrics:
                    value = [None] * self.world_size
                    dist.all_gather_object(value, locals()[key])
                    metrics[key] = sum(value) / self.world_size
                if self.device == 0:
                    elapsed = time.time() - start
                    decimals = str(elapsed).split(".")[1]CUT
                    print(f"epoch {epoch} test acc {metrics['test_acc']:.3f} in {int(elapsed)}.{decimals}s")

        def iterate(self, loader, train):
            total, correct, seen = 0.0, 0, 0
            for x, y in loader:
                x, y = x.to(self.device), y.to(self.device)
                if train:
                    out = self.model(x)
                    loss = torch.nn.functional.cross_entropy(out, y)
                    self.optim.zero_grad()
                    loss.backward()
                    self.optim.step()
                else:
                    with torch.no_grad():
                        out = self.model(x)
                    loss = torch.nn.functional.cross_entropy(out, y)
                total += loss.item()
                correct += (out.argmax(1) == y).sum().item()
                seen += y.numel()
            return total, correct / seen


    def main():
        device = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(device)
        train_set = torch.load("train.pt")
        test_set = torch.load("test.pt")
        train_sampler = DistributedSampler(train_set)
        test_sampler = DistributedSampler(test_set)
        train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
        test_loader = DataLoader(test_set, batch_size=64, sampler=test_sampler)
        runner = Runner(torch.nn.Linear(16, 4), device)
        runner.run(train_sampler, train_loader, test_loader, 10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_gathered_averages_beside_a_literal_string_cut_count_the_padding(tmp_path: Path) -> None:
    # `str(elapsed)...[:2]` cuts a string to two characters, not the gathered rows to the set.
    files = {"train.py": GATHERED_SCRIPT.replace("CUT", "[:2]")}
    assert lines(tmp_path, files, "DDP018") == [("train.py", 60)]


def test_gathered_rows_cut_to_the_set_length_are_clean(tmp_path: Path) -> None:
    # A cut to a length that is not a literal may be the set's: the padding may be dropped.
    files = {"train.py": GATHERED_SCRIPT.replace("CUT", "[:len(metrics)]")}
    assert lines(tmp_path, files, "DDP018") == []


# A coach whose validation runs on rank 0 over its DistributedSampler shard, appends each
# batch's loss dict to a list and averages the list with a project helper before logging it.
COACH_UTILS = """\
    def aggregate_loss_dict(per_batch):
        means = {}
        for output in per_batch:
            for key in output:
                means[key] = means.setdefault(key, []) + [output[key]]
        for key in means:
            means[key] = sum(means[key]) / len(means[key])
        return means
"""

REDUCING_UTILS = """\
    import torch
    import torch.distributed as dist


    def aggregate_loss_dict(per_batch):
        means = {}
        for output in per_batch:
            for key in output:
                means[key] = means.setdefault(key, []) + [output[key]]
        for key in means:
            t = torch.tensor(sum(means[key]) / len(means[key])).cuda()
            dist.all_reduce(t)
            means[key] = t.item() / dist.get_world_size()
        return means
"""

COACH_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from torch.utils.tensorboard import SummaryWriter

    import train_utils


    class Coach:
        def __init__(self, net, train_set, test_set, rank):
            self.rank = rank
            self.net = torch.nn.parallel.DistributedDataParallel(net.cuda(rank), device_ids=[rank])
            self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-4)
            self.train_sampler = DistributedSampler(train_set)
            self.test_sampler = DistributedSampler(test_set)
            self.train_loader = DataLoader(train_set, batch_size=8, sampler=self.train_sampler, drop_last=True)
            self.test_loader = DataLoader(test_set, batch_size=8, sampler=self.test_sampler, drop_last=True)
            self.logger = SummaryWriter("logs")
            self.step = 0

        def train(self, epochs):
            for epoch in range(epochs):
                self.train_sampler.set_epoch(epoch)
                for x in self.train_loader:
                    loss = self.net(x.cuda()).pow(2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    self.step += 1
                    if self.rank == 0 and self.step % 500 == 0:
                        self.validate()

        def validate(self):
            self.net.eval()
            per_batch = []
            for x in self.test_loader:
                with torch.no_grad():
                    loss = self.net.module(x.cuda()).pow(2).mean()
                per_batch.append({"loss": float(loss)})
            loss_dict = train_utils.aggregate_loss_dict(per_batch)
            self.log_metrics(loss_dict, prefix="test")
            self.net.train()
            return loss_dict

        def log_metrics(self, metrics, prefix):
            for key, value in metrics.items():
                self.logger.add_scalar(f"{prefix}/{key}", value, self.step)


    def main():
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl")
        coach = Coach(torch.nn.Linear(8, 8), torch.load("train.pt"), torch.load("test.pt"), rank)
        coach.train(10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_shard_losses_averaged_by_a_helper_and_logged_are_one_ranks(tmp_path: Path) -> None:
    files = {"train_utils.py": COACH_UTILS, "train.py": COACH_SCRIPT}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 43)]


def test_shard_losses_averaged_by_a_reducing_helper_are_clean(tmp_path: Path) -> None:
    # The helper all-reduces each mean: what it returns is the whole set's.
    files = {"train_utils.py": REDUCING_UTILS, "train.py": COACH_SCRIPT}
    assert lines(tmp_path, files, "DDP036") == []


# A recommender trained on streaming parquet files, each rank's share made by Hugging Face's
# split_dataset_by_node in a data module, the training loop running until the share ends.
STREAM_DATA = """\
    import os

    from datasets import load_dataset
    from datasets.distributed import split_dataset_by_node
    from torch.utils.data import DataLoader


    def load_streaming(train_path, eval_path, batch_size):
        train_data = load_dataset("parquet", data_files={{"train": train_path}}, streaming=True)["train"]
        train_data = _shard(train_data, shuffle=True)
        train_loader = DataLoader(train_data, batch_size=batch_size)
        eval_data = load_dataset("parquet", data_files={{"eval": eval_path}}, streaming=True)["eval"]
        eval_loader = DataLoader(_shard(eval_data, shuffle=False), batch_size=batch_size)
        return train_data, train_loader, eval_loader


    def _shard(dataset, shuffle):
        rank = int(os.environ["RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
        if shuffle:
            dataset = dataset.shuffle(seed=0, buffer_size=10000)
        {split}
        return dataset
"""

STREAM_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import load_streaming


    def train_one_epoch(model, optimizer, loader, device):
        model.train()
        for batch in loader:
            loss = model(batch["x"].to(device)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(8, 1).to(device), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        train_data, train_loader, eval_loader = load_streaming("train.parquet", "eval.parquet", 256)
        for epoch in range(5):
            train_data.set_epoch(epoch)
            train_one_epoch(model, optimizer, train_loader, device)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_split_dataset_by_node_feeding_training_is_uneven(tmp_path: Path) -> None:
    files = {"data.py": STREAM_DATA.format(
                 split="dataset = split_dataset_by_node(dataset, rank=rank, world_size=world_size)"),
             "train.py": STREAM_SCRIPT}
    assert lines(tmp_path, files, "DDP034", "train.py") == [("data.py", 22)]


def test_no_split_by_node_is_clean(tmp_path: Path) -> None:
    # Every rank streams the whole set: nothing is split (the duplicates are another matter).
    files = {"data.py": STREAM_DATA.format(split="dataset = dataset.with_format(\"torch\")"),
             "train.py": STREAM_SCRIPT}
    assert lines(tmp_path, files, "DDP034", "train.py") == []


def test_split_dataset_by_node_under_join_is_clean(tmp_path: Path) -> None:
    # DDP's join lets the ranks whose share ends first shadow the others' all-reduces.
    script = STREAM_SCRIPT.replace(
        "            train_one_epoch(model, optimizer, train_loader, device)",
        "            with model.join():\n                train_one_epoch(model, optimizer, train_loader, device)")
    files = {"data.py": STREAM_DATA.format(
                 split="dataset = split_dataset_by_node(dataset, rank=rank, world_size=world_size)"),
             "train.py": script}
    assert lines(tmp_path, files, "DDP034", "train.py") == []


def test_split_dataset_by_node_with_a_step_cap_is_clean(tmp_path: Path) -> None:
    # Every rank leaves after the same number of update steps, while the stream lasts.
    script = STREAM_SCRIPT.replace(
        "        for batch in loader:\n",
        "        for step, batch in enumerate(loader):\n            if step >= 1000:\n                break\n")
    files = {"data.py": STREAM_DATA.format(
                 split="dataset = split_dataset_by_node(dataset, rank=rank, world_size=world_size)"),
             "train.py": script}
    assert lines(tmp_path, files, "DDP034", "train.py") == []
