"""Output on every rank (DDP020): a progress bar in a helper method that a trainer's epoch loop
runs at each epoch (`self.test()` → `self._test_split(loader)` with `for batch in
tqdm(loader):`) is reported on the bar, where `disable=` goes, not around the call. Through
`ddpcheck lint`, with the clean variant of a bar switched off by rank."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    from tqdm import tqdm


    class Trainer:
        def __init__(self, net, train_set, test_sets):
            self.rank = dist.get_rank()
            gpu = int(os.environ["LOCAL_RANK"])
            self.net = DistributedDataParallel(net.cuda(gpu), device_ids=[gpu])
            self.optimizer = torch.optim.AdamW(self.net.parameters(), lr=1e-4)
            self.train_loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set))
            self.test_sets = test_sets

        def train(self, epochs):
            for epoch in range(epochs):
                for batch in self.train_loader:
                    loss = self.net(batch.cuda()).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                self.test()

        def test(self):
            for name, data in self.test_sets.items():
                self._test_split(data)

        def _test_split(self, data):
            hits = 0
            for batch in tqdm(data{bar_args}):
                hits += int(batch.sum() > 0)
            return hits


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        Trainer(build(), load("train"), {{"a": load("a")}}).train(10)
"""


def test_bar_in_a_helper_the_epoch_loop_runs_is_reported_on_the_bar(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": TRAINER.format(bar_args="")}, "DDP020") == [("train.py", 33)]


def test_bar_switched_off_by_rank_in_the_helper_is_clean(tmp_path: Path) -> None:
    source = TRAINER.format(bar_args=", disable=self.rank != 0")
    assert lines(tmp_path, {"train.py": source}, "DDP020") == []
