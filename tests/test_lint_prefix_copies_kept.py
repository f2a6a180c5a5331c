"""A debugging dump that copies the DDP state dict's entries under stripped names into the same
dict (`state = model.state_dict()`, then `state[k.replace("module.", "")] = v`), through
`ddpcheck lint --select DDP019`: the saved dict keeps every `module.` key beside the copies, so
the strip does not silence the finding. A strip into a fresh dict, or one that deletes the old
key, stays silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP019") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


ENGINE = """\
    import math
    import torch
    import torch.distributed as dist


    def train_one_epoch(model, criterion, loader, optimizer, device):
        model.train()
        for images, targets in loader:
            outputs = model(images.to(device))
            loss = criterion(outputs, targets.to(device))
            if not math.isfinite(loss.item()):
                state = model.state_dict()
                for key, value in model.state_dict().items():
                    plain = key.replace("module.", "")
                    state[plain] = value
                if dist.get_rank() == 0:
                    torch.save({"model": state}, "nan_dump.pth")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""

TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from engine import train_one_epoch
    from parts import Detector, Boxes


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = DDP(Detector().cuda(), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
        data = Boxes()
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        for epoch in range(12):
            sampler.set_epoch(epoch)
            train_one_epoch(model, torch.nn.functional.mse_loss, loader, optimizer, "cuda")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

PARTS = """\
    import torch


    class Detector(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.head(x)


    class Boxes(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.zeros(4), torch.zeros(4)
"""


def _lint(tmp_path: Path, engine: str) -> list[tuple[str, int]]:
    files = {"train.py": TRAIN, "engine.py": engine, "parts.py": PARTS}
    return _lines(lint_project(tmp_path, files, "train.py", select="DDP019"))


def test_stripped_copies_beside_the_prefixed_keys_are_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, ENGINE) == [("engine.py", 12)]


def test_stripped_keys_in_a_fresh_dict_are_silent(tmp_path: Path) -> None:
    engine = ENGINE.replace("                state = model.state_dict()\n", "                state = {}\n")
    assert _lint(tmp_path, engine) == []


def test_old_key_deleted_as_the_copy_is_written_is_silent(tmp_path: Path) -> None:
    engine = ENGINE.replace("                    state[plain] = value\n",
                            "                    state[plain] = value\n"
                            "                    del state[key]\n")
    assert _lint(tmp_path, engine) == []
