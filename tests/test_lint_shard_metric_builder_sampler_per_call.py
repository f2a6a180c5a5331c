"""A loader builder that takes its sampler as a parameter, through `ddpcheck lint --select
DDP036`: the training call hands it a project sampler built for one rank, the validation call
hands it None. The validation loop then reads the whole set (rank 0 only, here) and its PSNR is
no shard's; a validation loader built with the rank's sampler is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP036") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


LOADERS = """\
    import math

    import torch
    import torch.utils.data


    class RankSampler(torch.utils.data.Sampler):
        def __init__(self, dataset, world_size, rank):
            self.dataset = dataset
            self.world_size = world_size
            self.rank = rank

        def __iter__(self):
            return iter(range(self.rank, len(self.dataset), self.world_size))

        def __len__(self):
            return math.ceil(len(self.dataset) / self.world_size)


    def make_loader(dataset, opts, sampler=None):
        if opts["phase"] == "train":
            return torch.utils.data.DataLoader(dataset, batch_size=opts["batch"], sampler=sampler, num_workers=4)
        return torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=False)
"""

TRAIN = """\
    import logging

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from loaders import RankSampler, make_loader

    logger = logging.getLogger("train")


    def psnr(a, b):
        return float(10 * torch.log10(1.0 / torch.mean((a - b) ** 2)))


    def main(net, train_set, val_set, opts):
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        world_size = dist.get_world_size()
        model = DistributedDataParallel(net.cuda(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(model.parameters())
        train_sampler = RankSampler(train_set, world_size, rank)
        train_loader = make_loader(train_set, opts["train"], train_sampler)
        val_loader = make_loader(val_set, opts["val"], None)
        for step, (lq, gt) in enumerate(train_loader):
            loss = (model(lq.cuda(rank)) - gt.cuda(rank)).abs().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 1000 == 0 and rank == 0:
                total = 0.0
                count = 0
                with torch.no_grad():
                    for vlq, vgt in val_loader:
                        total += psnr(model.module(vlq.cuda(rank)), vgt.cuda(rank))
                        count += 1
                logger.info("psnr %.3f", total / count)
"""


def test_a_validation_loader_built_without_the_rank_sampler_reads_the_whole_set(tmp_path: Path) -> None:
    files = {"train.py": TRAIN, "loaders.py": LOADERS}
    assert _lines(lint_project(tmp_path, files, "train.py", "loaders.py", select="DDP036")) == []


def test_a_validation_loader_built_with_the_rank_sampler_is_a_shard(tmp_path: Path) -> None:
    sharded = TRAIN.replace('val_loader = make_loader(val_set, opts["val"], None)',
                            'val_loader = make_loader(val_set, opts["train"], RankSampler(val_set, world_size, rank))')
    assert sharded != TRAIN
    files = {"train.py": sharded, "loaders.py": LOADERS}
    assert _lines(lint_project(tmp_path, files, "train.py", "loaders.py", select="DDP036")) == [("train.py", 37)]
