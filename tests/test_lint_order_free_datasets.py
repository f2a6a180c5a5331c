"""A shuffling DistributedSampler without `set_epoch` over a dataset whose `__getitem__` never reads
the index it is given (each item drawn from an on-line generator, or at random), through
`ddpcheck lint`: the order the sampler hands out changes nothing, so nothing is reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


MIXING_DATASET = """\
    import random

    import torch
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler


    def mix_forever(clean, noise):
        while True:
            c, n = random.choice(clean), random.choice(noise)
            yield c + n, c


    class OnlineMixDataset(Dataset):
        def __init__(self, clean, noise, length):
            self.stream = mix_forever(clean, noise)
            self.length = length

        def __len__(self):
            return self.length

        def __getitem__(self, item):
            mixture, target = next(self.stream)
            return torch.tensor(mixture), torch.tensor(target)


    def build_loader(clean, noise, batch_size, multi_gpu=True):
        dataset = OnlineMixDataset(clean, noise, 10000)
        sampler = DistributedSampler(dataset) if multi_gpu else None
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=sampler is None)
"""

TRAIN = """\
    import torch
    import torch.multiprocessing as mp
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data.mixing import build_loader


    class Trainer:
        def __init__(self, gpu_id, loader):
            self.model = DDP(torch.nn.Linear(4, 4).to(gpu_id), device_ids=[gpu_id])
            self.loader = loader

        def train(self, epochs):
            for epoch in range(epochs):
                for mixture, target in self.loader:
                    self.model(mixture)


    def main(gpu_id, world_size):
        init_process_group("nccl", rank=gpu_id, world_size=world_size)
        loader = build_loader([1.0, 2.0], [0.1, 0.2], 8)
        Trainer(gpu_id, loader).train(20)
        destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(main, args=(2,), nprocs=2)
"""


def _files(dataset: str = MIXING_DATASET) -> dict[str, str]:
    return {"data/__init__.py": "", "data/mixing.py": dataset, "train.py": TRAIN}


def test_datasets_that_ignore_the_index_need_no_set_epoch(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, _files(), "train.py", select="DDP002")
    assert _lines(findings, "DDP002") == []
    # Drawn at random, the index named `_`.
    random_pick = MIXING_DATASET.replace(
        "        def __getitem__(self, item):\n            mixture, target = next(self.stream)",
        "        def __getitem__(self, _):\n            mixture, target = random.choice(self.pairs)").replace(
        "self.stream = mix_forever(clean, noise)", "self.pairs = list(zip(clean, noise))")
    findings = lint_project(tmp_path, _files(random_pick), "train.py", select="DDP002")
    assert _lines(findings, "DDP002") == []


def test_datasets_that_read_the_index_are_still_reported(tmp_path: Path) -> None:
    indexed = MIXING_DATASET.replace("mixture, target = next(self.stream)",
                                     "mixture, target = self.pairs[item]").replace(
        "self.stream = mix_forever(clean, noise)", "self.pairs = list(zip(clean, noise))")
    findings = lint_project(tmp_path, _files(indexed), "train.py", select="DDP002")
    assert _lines(findings, "DDP002") == [15]
    # Passed on to a helper that reads it.
    handed = MIXING_DATASET.replace("mixture, target = next(self.stream)",
                                    "mixture, target = self.read(item)")
    findings = lint_project(tmp_path, _files(handed), "train.py", select="DDP002")
    assert _lines(findings, "DDP002") == [15]
