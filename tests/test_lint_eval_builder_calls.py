"""A loader builder whose training call never reaches its sampler-less branch, through `ddpcheck
lint`: the branch serves only the calls that build evaluation loaders (`val_loader =
make_loader(cfg, tag="val")`), which read the whole set on every rank by design."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


TAGGED_BUILDER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def make_data_loader(dataset, world_size, rank, tag=""):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=(tag == "train"))
        if tag == "train":
            loader = DataLoader(dataset, batch_size=16, shuffle=False, sampler=sampler)
        else:
            loader = DataLoader(dataset, batch_size=16, shuffle=False)
        return loader


    def main():
        dist.init_process_group("nccl")
        rank, world_size = dist.get_rank(), dist.get_world_size()
        train_loader = make_data_loader(list(range(100)), world_size, rank, tag="train")
        val_loader_x2 = make_data_loader(list(range(10)), world_size, rank, tag="val_x2")
        val_loader_x4 = make_data_loader(list(range(10)), world_size, rank, tag="val_x4")
        model = DDP(torch.nn.Linear(4, 4).cuda())
        for epoch in range(3):
            train_loader.sampler.set_epoch(epoch)
            for batch in train_loader:
                pass
            for loader in (val_loader_x2, val_loader_x4):
                for batch in loader:
                    pass
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

SPLIT_METHOD = """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    class DataModule:
        def __init__(self, sets):
            self.sets = sets
            self.train_loader = self._loader("train", is_train=True)
            self.valid_loader = self._loader("valid", is_train=False)

        def _loader(self, split, is_train):
            dataset = self.sets[split]
            if is_train:
                return DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
            return DataLoader(dataset, batch_size=64)
"""

SPLIT_MAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data.module import DataModule


    def main():
        dist.init_process_group("nccl")
        data = DataModule({"train": list(range(100)), "valid": list(range(10))})
        model = DDP(torch.nn.Linear(4, 4).cuda())
        for epoch in range(2):
            data.train_loader.sampler.set_epoch(epoch)
            for batch in data.train_loader:
                pass
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_evaluation_calls_of_a_builder_are_not_training_loaders(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train_ddp.py": TAGGED_BUILDER}, "train_ddp.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    files = {"data/__init__.py": "", "data/module.py": SPLIT_METHOD, "main.py": SPLIT_MAIN}
    findings = lint_project(tmp_path, files, "main.py", select="DDP001")
    assert _lines(findings, "DDP001") == []


def test_a_training_call_that_reaches_the_branch_is_still_reported(tmp_path: Path) -> None:
    # The second training set is built with a tag the builder does not shard.
    extra = TAGGED_BUILDER.replace(
        '        val_loader_x4 = make_data_loader(list(range(10)), world_size, rank, tag="val_x4")',
        '        val_loader_x4 = make_data_loader(list(range(10)), world_size, rank, tag="val_x4")\n'
        '        extra_train_loader = make_data_loader(list(range(50)), world_size, rank, tag="extra")')
    findings = lint_project(tmp_path, {"train_ddp.py": extra}, "train_ddp.py", select="DDP001")
    assert _lines(findings, "DDP001") == [13]
    # Every call reaches it: no sampler for anyone.
    files = {"data/__init__.py": "", "data/module.py": SPLIT_METHOD.replace("if is_train:", "if False:"),
             "main.py": SPLIT_MAIN}
    findings = lint_project(tmp_path, files, "main.py", select="DDP001")
    assert _lines(findings, "DDP001") == [16]
