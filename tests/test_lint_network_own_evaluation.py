"""DDP020 for a progress bar over an evaluation loop written as a method of the network itself
(`for x in tqdm(loaders["dev"]): logits = self.score(x)`, `score` another method of the same `nn.Module`
subclass): the loop runs the network's own forward on its items, so the bar draws at each step,
and is reported where it is made. Through `ddpcheck lint --select DDP020`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


RECOMMENDER = """\
    import torch
    import torch.distributed as dist
    from tqdm import tqdm


    class Recommender(torch.nn.Module):
        def __init__(self, rank):
            super().__init__()
            self.rank = rank
            self.user = torch.nn.Embedding(1000, 32)
            self.item = torch.nn.Embedding(5000, 32)

        def score(self, batch):
            return (self.user(batch["user"]) * self.item(batch["item"])).sum(-1)

        def forward(self, batch):
            return torch.nn.functional.binary_cross_entropy_with_logits(self.score(batch), batch["label"])

        def _validate(self, loaders):
            scores = []
            for batch in tqdm(loaders["dev"], desc="scoring"{disable}):
                scores.extend(self.score(batch).tolist())
            return scores

        def fit(self, ddp, optimizer, train_loader, loaders, epochs):
            for epoch in range(epochs):
                for batch in train_loader:
                    loss = ddp(batch)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                with torch.no_grad():
                    self._validate(loaders)
"""

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from recommender import Recommender


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        net = Recommender(rank).cuda()
        ddp = DDP(net, device_ids=[rank])
        optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
        clicks = torch.load("clicks.pt")
        train_loader = DataLoader(clicks, batch_size=256, sampler=DistributedSampler(clicks))
        loaders = {}
        for name in ("dev", "test"):
            loaders[name] = DataLoader(torch.load(f"{name}.pt"), batch_size=256)
        net.fit(ddp, optimizer, train_loader, loaders, 5)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_bar_over_the_networks_own_evaluation_is_reported_where_made(tmp_path: Path) -> None:
    files = {"train.py": TRAIN, "recommender.py": RECOMMENDER.replace("{disable}", "")}
    assert lines(tmp_path, files, "DDP020") == [("recommender.py", 21)]


def test_bar_disabled_off_rank_zero_is_clean(tmp_path: Path) -> None:
    files = {"train.py": TRAIN, "recommender.py": RECOMMENDER.replace("{disable}", ", disable=self.rank != 0")}
    assert lines(tmp_path, files, "DDP020") == []
