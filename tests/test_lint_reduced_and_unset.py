"""Values the run settles before they are read, through `ddpcheck lint`: counters that are
reduced across ranks as they are added (or added locally only on the single-process path), an
attribute read with `getattr(..., default)` that no code of the run ever sets, and the shuffle of a
DistributedSampler, which draws from its own generator rather than torch's."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SPEECH = """\
    import os
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def sum_over_ranks(value):
        total = value.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total


    def validate(model, loader, {flag}):
        model.eval()
        started = time.perf_counter()
        frames = 0
        with torch.no_grad():
            for mels, lengths in loader:
                model(mels.cuda())
                if {flag}:
                    frames += {reduced}
                else:
                    frames += lengths.sum().item()
        print(f"val frames/s {{frames / (time.perf_counter() - started):.1f}}")


    def main(net, valid_set):
        world_size = int(os.environ.get("WORLD_SIZE", 1))
        {flag} = world_size > 1
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = DDP(net.cuda(), device_ids=[local_rank])
        loader = DataLoader(valid_set, batch_size=16, sampler=DistributedSampler(valid_set, shuffle=False))
        validate(model, loader, {flag})
        dist.destroy_process_group()
    """


def _speech(flag: str = "distributed_run", reduced: str = "sum_over_ranks(lengths.sum()).item()") -> str:
    return SPEECH.format(flag=flag, reduced=reduced)


def test_counters_reduced_as_they_are_added_are_clean(tmp_path):
    _write(tmp_path, {"train.py": _speech()})
    assert _findings(tmp_path, "train.py", select="DDP036") == set()


def test_a_run_flag_named_for_ddp_reads_as_the_distributed_test(tmp_path):
    _write(tmp_path, {"train.py": _speech(flag="ddp_enabled")})
    assert _findings(tmp_path, "train.py", select="DDP036") == set()


def test_counters_added_locally_on_the_distributed_path_are_reported(tmp_path):
    _write(tmp_path, {"train.py": _speech(reduced="lengths.sum().item()")})
    assert _findings(tmp_path, "train.py", select="DDP036") == {("train.py", 28, "DDP036")}


def test_local_adds_under_a_test_that_is_not_about_distribution_count(tmp_path):
    # `log_frames` says nothing about the run being distributed: the `else` adds run there too.
    _write(tmp_path, {"train.py": _speech(flag="log_frames")})
    assert _findings(tmp_path, "train.py", select="DDP036") == {("train.py", 28, "DDP036")}


STATE = """\
    from dataclasses import dataclass

    import torch


    @dataclass
    class RunState:
        use_ddp: bool
        rank: int
        world_size: int
        device: torch.device
    """

DATA = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def make_loaders(train_set, valid_set, state, batch_size=32):
        if state and getattr(state, "{attr}", False):
            train_sampler = DistributedSampler(train_set, num_replicas=state.world_size, rank=state.rank)
            valid_sampler = DistributedSampler(valid_set, num_replicas=state.world_size, rank=state.rank, shuffle=False)
        else:
            train_sampler = None
            valid_sampler = None
        train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=train_sampler is None,
                                  sampler=train_sampler)
        valid_loader = DataLoader(valid_set, batch_size=batch_size, sampler=valid_sampler)
        return train_loader, valid_loader
    """

CLASSIFY = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import make_loaders
    from state import RunState


    def evaluate(model, loader, device):
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
                total += y.size(0)
        return correct / max(total, 1)


    def main(net, train_set, valid_set, epochs=3):
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        state = RunState(use_ddp=True, rank=dist.get_rank(), world_size=dist.get_world_size(),
                         device=torch.device("cuda", local_rank))
        train_loader, valid_loader = make_loaders(train_set, valid_set, state)
        model = DDP(net.to(state.device), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            if hasattr(train_loader.sampler, "set_epoch"):
                train_loader.sampler.set_epoch(epoch)
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.to(state.device)), y.to(state.device)).backward()
                optimizer.step()
            accuracy = evaluate(model, valid_loader, state.device)
            if state.rank == 0:
                print(f"epoch {epoch} accuracy {accuracy:.3f}")
        dist.destroy_process_group()
    """


def test_getattr_of_an_attribute_nobody_sets_takes_its_default(tmp_path):
    # The state class has `use_ddp`, not `is_distributed`: the sharding branch never runs, so the
    # training loader reads the whole set on every rank and the accuracy is the full set's.
    _write(tmp_path, {"state.py": STATE, "data.py": DATA.format(attr="is_distributed"), "classify.py": CLASSIFY})
    assert _findings(tmp_path, "classify.py", select="DDP001,DDP036") == {("data.py", 12, "DDP001")}


def test_getattr_of_a_field_the_class_declares_may_hold(tmp_path):
    _write(tmp_path, {"state.py": STATE, "data.py": DATA.format(attr="use_ddp"), "classify.py": CLASSIFY})
    found = _findings(tmp_path, "classify.py", select="DDP001,DDP036")
    assert ("data.py", 12, "DDP001") not in found
    assert ("classify.py", 40, "DDP036") in found


def test_getattr_of_an_attribute_set_after_construction_may_hold(tmp_path):
    later = CLASSIFY.replace("        train_loader, valid_loader = make_loaders(",
                             "        state.is_distributed = True\n        train_loader, valid_loader = make_loaders(")
    _write(tmp_path, {"state.py": STATE, "data.py": DATA.format(attr="is_distributed"), "classify.py": later})
    assert ("data.py", 12, "DDP001") not in _findings(tmp_path, "classify.py", select="DDP001,DDP036")


SEEDED = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import transforms


    def main(net, make_dataset, epochs=10):
        torch.manual_seed(1234)
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        prepare = transforms.Compose([{augment}transforms.Resize(224), transforms.CenterCrop(224), transforms.ToTensor()])
        train_set = make_dataset(prepare)
        sampler = DistributedSampler(dataset=train_set, num_replicas=dist.get_world_size(), shuffle=True)
        loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=4)
        model = DDP(net.cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
        dist.destroy_process_group()
    """


def test_a_distributed_sampler_shuffle_is_no_draw_from_the_seeded_generator(tmp_path):
    _write(tmp_path, {"train.py": SEEDED.format(augment="")})
    assert _findings(tmp_path, "train.py", select="DDP029") == set()


def test_random_augmentation_with_the_same_seed_is_reported(tmp_path):
    _write(tmp_path, {"train.py": SEEDED.format(augment="transforms.RandomHorizontalFlip(), ")})
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 12, "DDP029")}


def test_a_shuffling_loader_without_a_sampler_still_draws(tmp_path):
    plain = SEEDED.format(augment="").replace("sampler=sampler, num_workers=4", "shuffle=True, num_workers=4")
    _write(tmp_path, {"train.py": plain})
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 12, "DDP029")}


NET = """\
    from torch import nn


    class Tagger(nn.Module):
        def __init__(self, vocab, dim=128):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.rnn = nn.LSTM(dim, dim, batch_first=True)
            self.dropout = nn.Dropout(0.2)
            self.head = nn.Linear(dim, 2)

        def forward(self, tokens):
            states, _ = self.rnn(self.embed(tokens))
            return self.head({last})
    """

BUCKETS = """\
    import torch
    from torch.utils.data import Sampler


    class BucketSampler(Sampler):
        def __init__(self, lengths, rank, world_size, seed=0):
            self.lengths, self.rank, self.world_size, self.seed, self.epoch = lengths, rank, world_size, seed, 0

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.lengths), generator=generator).tolist()
            return iter(order[self.rank::self.world_size])

        def __len__(self):
            return len(self.lengths) // self.world_size
    """

TAGGING = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    from buckets import BucketSampler
    from net import Tagger


    def main(train_set, lengths, epochs=5):
        torch.manual_seed(42)
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        sampler = BucketSampler(lengths, dist.get_rank(), dist.get_world_size())
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        model = DDP(Tagger(30000).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for tokens, labels in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(tokens.cuda()), labels.cuda()).backward()
                optimizer.step()
        dist.destroy_process_group()
    """


def test_a_dropout_layer_never_called_and_a_sampler_with_its_own_generator_draw_nothing(tmp_path):
    _write(tmp_path, {"net.py": NET.format(last="states[:, -1]"), "buckets.py": BUCKETS, "tagging.py": TAGGING})
    assert _findings(tmp_path, "tagging.py", select="DDP029") == set()


def test_a_dropout_layer_the_forward_calls_draws(tmp_path):
    _write(tmp_path, {"net.py": NET.format(last="self.dropout(states[:, -1])"), "buckets.py": BUCKETS,
                      "tagging.py": TAGGING})
    assert _findings(tmp_path, "tagging.py", select="DDP029") == {("tagging.py", 13, "DDP029")}



def test_a_draw_given_its_own_generator_leaves_the_seeded_one_alone(tmp_path):
    own = SEEDED.format(augment="").replace(
        "        train_set = make_dataset(prepare)\n",
        "        mixer = torch.Generator().manual_seed(7)\n"
        "        train_set = make_dataset(prepare, order=torch.randperm(1000, generator=mixer))\n")
    _write(tmp_path, {"train.py": own})
    assert _findings(tmp_path, "train.py", select="DDP029") == set()
    _write(tmp_path, {"train.py": own.replace("torch.randperm(1000, generator=mixer)", "torch.randperm(1000)")})
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 12, "DDP029")}
