"""A script that hands its configuration to a trainer in a project package, through `ddpcheck
lint`: what the trainer does with it (the seed it reads, the project sampler it builds) is judged
with the values the script passes."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

ENTRY = """\
    import hydra

    from speech.training import train


    @hydra.main(config_name="config")
    def hydra_main(cfg):
        train(cfg=cfg)


    if __name__ == "__main__":
        hydra_main()
    """

TRAINING = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from speech.loader import AudioLoader, BucketSampler, ElasticSampler


    def train(cfg):
        torch.manual_seed(SEED)
        is_distributed = os.environ.get("LOCAL_RANK")
        if is_distributed:
            dist.init_process_group("nccl")
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            sampler = ElasticSampler(dataset=cfg.dataset, batch_size=cfg.data.batch_size)
        else:
            sampler = BucketSampler(dataset=cfg.dataset, batch_size=cfg.data.batch_size)
        loader = AudioLoader(dataset=cfg.dataset, num_workers=cfg.data.num_workers, batch_sampler=sampler)
        model = torch.nn.Sequential(torch.nn.Linear(161, 512), torch.nn.Dropout(0.3), torch.nn.Linear(512, 29))
        model = DistributedDataParallel(model.cuda())
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
        for epoch in range(cfg.training.epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.ctc_loss(model(x.cuda()), y, None, None)
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()
    """

LOADER = """\
    import math

    from torch.utils.data import DataLoader, DistributedSampler, Sampler


    class AudioLoader(DataLoader):
        pass


    class BucketSampler(Sampler):
        def __init__(self, dataset, batch_size=1):
            self.bins = [list(range(i, i + batch_size)) for i in range(0, len(dataset), batch_size)]

        def __iter__(self):
            return iter(self.bins)


    class ElasticSampler(DistributedSampler):
        def __init__(self, dataset, num_replicas=None, rank=None, batch_size=1):
            super().__init__(dataset=dataset, num_replicas=num_replicas, rank=rank)
            self.bins = [list(range(i, i + batch_size)) for i in range(0, len(dataset), batch_size)]
            self.num_samples = int(math.ceil(len(self.bins) / self.num_replicas))
    """


def _lint(tmp_path: Path, seed: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": ENTRY, "speech/__init__.py": "",
                             "speech/training.py": TRAINING.replace("SEED", seed), "speech/loader.py": LOADER})
    return finding_set(tmp_path, "train.py", select="DDP029")


def test_the_configuration_seed_read_in_the_trainer_is_reported_there(tmp_path: Path) -> None:
    # Hydra composes the same configuration on every rank; the trainer seeds torch with its field
    # and builds a DistributedSampler subclass: the workers of every rank draw alike.
    assert _lint(tmp_path, "cfg.training.seed") == {("training.py", 11, "DDP029")}


def test_a_seed_offset_by_the_rank_in_the_trainer_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, 'cfg.training.seed + int(os.environ["RANK"])') == set()
