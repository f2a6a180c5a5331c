"""DDP018 through `ddpcheck lint`: a trainer that evaluates every few steps inside its training
loop and all-reduces, right there, the figures its evaluation method returns: the reduce sits in
a training step, but what it sums is the padded evaluation's."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

TRAINER = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_set, dev_set, eval_every):
        self.model = model
        self.eval_every = eval_every
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        self.train_sampler = DistributedSampler(train_set)
        self.dev_sampler = DistributedSampler(dev_set{dev_options})
        self.train_loader = DataLoader(train_set, batch_size=16, sampler=self.train_sampler)
        self.dev_loader = DataLoader(dev_set, batch_size=32, sampler=self.dev_sampler)

    def _score_dev(self):
        self.model.eval()
        nll = torch.zeros(1, device="cuda")
        hits = torch.zeros(1, device="cuda")
        with torch.no_grad():
            for tokens, target in self.dev_loader:
                logits = self.model(tokens.cuda())
                nll += torch.nn.functional.cross_entropy(logits, target.cuda(), reduction="sum")
                hits += (logits.argmax(-1) == target.cuda()).sum()
        self.model.train()
        return nll, hits

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_sampler.set_epoch(epoch)
            for step, (tokens, target) in enumerate(self.train_loader):
                loss = torch.nn.functional.cross_entropy(self.model(tokens.cuda()), target.cuda())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                if step % self.eval_every == 0:
{reduce}
                    if dist.get_rank() == 0:
                        print(step, loss.item())
"""

EVAL_REDUCED = """\
                    nll, hits = self._score_dev()
                    dist.all_reduce(nll)
                    dist.all_reduce(hits)
                    if dist.get_rank() == 0:
                        print("dev nll", nll.item(), "hits", hits.item())"""

LOSS_REDUCED = """\
                    shown = loss.detach().clone()
                    dist.all_reduce(shown)
                    if dist.get_rank() == 0:
                        print("train loss", shown.item() / dist.get_world_size())"""

MAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer import Trainer


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    train_set = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    dev_set = torch.utils.data.TensorDataset(torch.randn(50, 8), torch.randint(0, 4, (50,)))
    model = DDP(torch.nn.Linear(8, 4).cuda(), device_ids=[local_rank])
    trainer = Trainer(model, train_set, dev_set, eval_every=100)
    trainer.fit(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _lint(tmp_path, reduce: str = EVAL_REDUCED, dev_options: str = "") -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": MAIN,
                      "trainer.py": TRAINER.format(reduce=reduce, dev_options=dev_options)})
    return _findings(tmp_path, "train.py", select="DDP018")


def test_the_evaluation_reduced_inside_the_training_loop_is_reported_at_the_sampler(tmp_path):
    assert _lint(tmp_path) == {("trainer.py", 13, "DDP018")}


def test_a_sampler_that_drops_the_tail_is_clean(tmp_path):
    assert _lint(tmp_path, dev_options=", drop_last=True") == set()


def test_a_training_loss_reduced_in_the_loop_is_no_evaluation_reduce(tmp_path):
    # Only the training step's loss is summed; the evaluation's figures are never reduced.
    assert _lint(tmp_path, reduce=LOSS_REDUCED) == set()
