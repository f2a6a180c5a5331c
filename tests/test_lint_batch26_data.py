"""Data loading and seeding on mechanisms seen on public scripts of batch 26: a file libcst's
node checks reject although Python reads it, a loader built in a method only rank 0 calls
(DDP001), and a shuffling loader of the single-process branch (DDP029); each through `ddpcheck
lint` on a small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A trainer script that starts the process group in `__main__` and never destroys it; one line
# glues a comprehension's `for` to the closing parenthesis of its element.
GLUED_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist


    def to_rgb(samples):
        return [{element}for x in samples]


    def train(args):
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[args.local_rank])
        for step in range(10):
            batch = to_rgb([torch.randn(4, 8).cuda()])
            loss = model(batch[0]).sum()
            loss.backward()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
        train(args)
"""


def test_comprehension_glued_to_a_parenthesis_is_still_checked(tmp_path: Path) -> None:
    # `(a if c else b)for x in xs` is valid Python that libcst's own node check rejects.
    files = {"train.py": GLUED_SCRIPT.format(element="(x.repeat(1, 3) if x.shape[1] == 1 else x)")}
    assert lines(tmp_path, files, "DDP005") == [("train.py", 23)]


def test_comprehension_spaced_finds_the_same(tmp_path: Path) -> None:
    files = {"train.py": GLUED_SCRIPT.format(element="(x.repeat(1, 3) if x.shape[1] == 1 else x) ")}
    assert lines(tmp_path, files, "DDP005") == [("train.py", 23)]


# A trainer whose training loader has a DistributedSampler, and whose `sampling` method builds a
# plain loader over a few validation images to draw samples from: `train` calls it under
# `{guard}`.
SAMPLE_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    class Trainer:
        def __init__(self, local_rank):
            self.local_rank = local_rank
            self.model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
            self.optim = torch.optim.Adam(self.model.parameters())
            dataset = TensorDataset(torch.zeros(64, 8))
            self.sampler = DistributedSampler(dataset)
            self.loader = DataLoader(dataset, batch_size=8, sampler=self.sampler)
            self.sample = None

        def _get_sample_data(self):
            ds = TensorDataset(torch.ones(16, 8))
            loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=0)
            (images,) = next(iter(loader))
            return images.cuda()

        def sampling(self, idx):
            if self.sample is None:
                self.sample = self._get_sample_data()
            with torch.no_grad():
                out = self.model(self.sample)
            torch.save(out, f"sample_{{idx}}.pt")

        def train(self):
            for epoch in range(10):
                self.sampler.set_epoch(epoch)
                for (x,) in self.loader:
                    loss = self.model(x.cuda()).sum()
                    self.optim.zero_grad()
                    loss.backward()
                    self.optim.step()
                {guard}
                    self.sampling(epoch)


    if __name__ == "__main__":
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl")
        Trainer(local_rank).train()
        dist.destroy_process_group()
"""


def test_loader_built_in_a_method_only_rank_zero_calls_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SAMPLE_SCRIPT.format(guard="if self.local_rank == 0:")}
    assert lines(tmp_path, files, "DDP001") == []


def test_loader_built_in_a_method_every_rank_calls_is_reported(tmp_path: Path) -> None:
    files = {"train.py": SAMPLE_SCRIPT.format(guard="if epoch % 2 == 0:")}
    assert lines(tmp_path, files, "DDP001") == [("train.py", 19)]


# The same seed on every rank; the distributed branch shards with a DistributedSampler, the
# single-process branch shuffles the loader itself; the model has {dropout}.
SEED_SCRIPT = """\
    import os
    import random
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def set_random_seed(seed=42):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 2)
            {dropout}

        def forward(self, x):
            return self.fc2(self.drop(torch.relu(self.fc1(x))))


    def main():
        set_random_seed(42)
        use_ddp = "LOCAL_RANK" in os.environ
        if use_ddp:
            torch.distributed.init_process_group(backend="nccl")
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
        else:
            local_rank = 0
        model = Net().cuda()
        dataset = TensorDataset(torch.zeros(64, 8), torch.zeros(64, dtype=torch.long))
        if use_ddp:
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, sampler=sampler, batch_size=8)
            model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        else:
            loader = DataLoader(dataset, batch_size=8, shuffle=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(5):
            if use_ddp:
                sampler.set_epoch(epoch)
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        if use_ddp:
            torch.distributed.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_shuffle_of_the_single_process_loader_is_no_draw_of_the_job(tmp_path: Path) -> None:
    # No dropout, no augmentation: the only draw is the shuffle of a loader no distributed run builds.
    files = {"train.py": SEED_SCRIPT.format(dropout="self.drop = nn.Identity()")}
    assert lines(tmp_path, files, "DDP029") == []


def test_same_seed_with_dropout_is_still_reported(tmp_path: Path) -> None:
    files = {"train.py": SEED_SCRIPT.format(dropout="self.drop = nn.Dropout(0.5)")}
    assert lines(tmp_path, files, "DDP029") == [("train.py", 27)]


# A validation loader over timm's ordered sampler, and a metric all-reduced over the ranks.
TIMM_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    {sampler_import}


    def validate(model, loader):
        correct = torch.zeros(1).cuda()
        total = torch.zeros(1).cuda()
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
                total += y.numel()
        dist.all_reduce(correct)
        dist.all_reduce(total)
        return (correct / total).item()


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_set = TensorDataset(torch.zeros(64, 8), torch.zeros(64, dtype=torch.long))
        val_set = TensorDataset(torch.zeros(50, 8), torch.zeros(50, dtype=torch.long))
        sampler_train = DistributedSampler(train_set)
        sampler_val = {sampler_val}
        train_loader = DataLoader(train_set, batch_size=8, sampler=sampler_train)
        val_loader = DataLoader(val_set, batch_size=8, sampler=sampler_val)
        for epoch in range(3):
            sampler_train.set_epoch(epoch)
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(validate(model, val_loader))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_timm_ordered_sampler_pads_the_evaluation_set(tmp_path: Path) -> None:
    files = {"train.py": TIMM_SCRIPT.format(sampler_import="from timm.data.loader import OrderedDistributedSampler",
                                            sampler_val="OrderedDistributedSampler(val_set)")}
    assert lines(tmp_path, files, "DDP018") == [("train.py", 29)]


def test_timm_ordered_sampler_through_the_package(tmp_path: Path) -> None:
    files = {"train.py": TIMM_SCRIPT.format(sampler_import="import timm.data",
                                            sampler_val="timm.data.OrderedDistributedSampler(val_set)")}
    assert lines(tmp_path, files, "DDP018") == [("train.py", 29)]


def test_a_project_sampler_of_the_same_name_that_pads_nothing_is_clean(tmp_path: Path) -> None:
    # Not timm's: a project class of the same name that keeps each rank's own share.
    files = {"train.py": TIMM_SCRIPT.format(sampler_import="from samplers import OrderedDistributedSampler",
                                            sampler_val="OrderedDistributedSampler(val_set)"),
             "samplers.py": """\
    import torch.distributed as dist
    from torch.utils.data import Sampler


    class OrderedDistributedSampler(Sampler):
        def __init__(self, dataset):
            self.dataset = dataset

        def __iter__(self):
            return iter(range(dist.get_rank(), len(self.dataset), dist.get_world_size()))

        def __len__(self):
            return len(range(dist.get_rank(), len(self.dataset), dist.get_world_size()))
"""}
    assert lines(tmp_path, files, "DDP018") == []
