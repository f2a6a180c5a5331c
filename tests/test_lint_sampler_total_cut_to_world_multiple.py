"""A project subclass of DistributedSampler that cuts its total to a multiple of the world size
(`self.total_size = len(dataset) - len(dataset) % self.num_replicas`) gives every rank the same
number of samples and repeats none: no uneven shares (DDP034) and no padded evaluation (DDP018).
One that sets the total to the dataset's whole length still leaves ranks one sample apart.
Through `ddpcheck lint` on a small project."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

SAMPLERS = """\
    import torch
    from torch.utils.data.distributed import DistributedSampler


    class ResumableSampler(DistributedSampler):
        \"\"\"Shuffles by epoch and seed, and resumes from an iteration after a restart.\"\"\"

        def __init__(self, dataset, seed=0):
            super().__init__(dataset, shuffle=False, seed=seed)
            self.start_iter = 0
            {total}
            self.num_samples = self.total_size // self.num_replicas

        def __iter__(self):
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=g).tolist()[:self.total_size]
            mine = order[self.rank:self.total_size:self.num_replicas]
            return iter(mine[self.start_iter:])
"""

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset

    from samplers import ResumableSampler


    def evaluate(model, loader):
        model.eval()
        hits = torch.zeros(2, device="cuda")
        with torch.no_grad():
            for x, y in loader:
                step = torch.tensor([(model(x.cuda()).argmax(1) == y.cuda()).sum(), len(y)], device="cuda")
                dist.all_reduce(step)
                hits += step
        return (hits[0] / hits[1]).item()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(16, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        train_set = TensorDataset(torch.randn(1000, 16), torch.randint(0, 4, (1000,)))
        val_set = TensorDataset(torch.randn(250, 16), torch.randint(0, 4, (250,)))
        train_sampler = ResumableSampler(train_set, seed=7)
        train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler, drop_last=True)
        val_loader = DataLoader(val_set, batch_size=32, sampler=ResumableSampler(val_set))
        for epoch in range(10):
            train_sampler.set_epoch(epoch)
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
            print(evaluate(model, val_loader))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _findings(tmp_path: Path, total: str) -> list[tuple[str, str, int]]:
    files = {"samplers.py": SAMPLERS.replace("{total}", total), "train.py": TRAIN}
    found = lint_project(tmp_path, files, "train.py", select="DDP018,DDP034")
    return sorted((f["code"], Path(f["path"]).name, f["location"]["line"]) for f in found)


def test_total_cut_to_a_multiple_of_the_world_size_is_even(tmp_path: Path) -> None:
    assert _findings(tmp_path, "self.total_size = len(dataset) - (len(dataset) % self.num_replicas)") == []
    # The same cut written as a floor division times the world size.
    assert _findings(tmp_path, "self.total_size = len(self.dataset) // self.num_replicas * self.num_replicas") == []


def test_total_left_at_the_whole_length_is_still_uneven(tmp_path: Path) -> None:
    # Neither padded nor dropped: the training backward and the evaluation's all_reduce per
    # batch run a different number of times on the ranks with one sample fewer.
    assert _findings(tmp_path, "self.total_size = len(self.dataset)") == [("DDP034", "train.py", 30),
                                                                         ("DDP034", "train.py", 32)]
