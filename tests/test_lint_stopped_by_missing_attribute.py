"""A function that reads, at its own top level, an attribute its object cannot have raises
AttributeError on every run: the evaluation loop after that read never runs, so neither its
per-batch output (DDP020) nor its unreduced shard metric (DDP036) happens. Here the evaluation
entry reads `loader.dataset.palette` where the project's dataset class never sets `palette`.
Through `ddpcheck lint`, with the variants where the attribute exists or the read may not
happen."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


DATA = """\
    import numpy as np
    from torch.utils.data import Dataset


    class Shapes(Dataset):
        def __init__(self, split):
            self.points = np.load(f"{{split}}_points.npy")
            self.labels = np.load(f"{{split}}_labels.npy")
            {extra}

        def __len__(self):
            return len(self.labels)

        def __getitem__(self, i):
            return self.points[i], self.labels[i]
"""

SCRIPT = """\
    import os
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    from data import Shapes


    def evaluate(opts):
        loader = DataLoader(Shapes("test"), batch_size=16, sampler=DistributedSampler(Shapes("test")))
        gpu = int(os.environ["LOCAL_RANK"])
        net = DistributedDataParallel(build_net().cuda(gpu), device_ids=[gpu])
        {read}
        hits, seen = 0, 0
        with torch.no_grad():
            for x, y in loader:
                pred = net(x.cuda(gpu)).argmax(1).cpu()
                hits += (pred == y).sum().item()
                seen += y.numel()
                print("batch done", seen)
        print("accuracy", hits / seen)


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        evaluate(None)
"""

READ = "palette = loader.dataset.palette"


def _lint(tmp_path: Path, extra: str = "pass", read: str = READ) -> list[tuple[str, int]]:
    files = {"data.py": DATA.format(extra=extra), "train.py": SCRIPT.format(read=read)}
    return lines(tmp_path, files, "DDP020,DDP036")


def test_loop_after_a_read_of_an_attribute_the_dataset_lacks_is_not_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path) == []


def test_loop_after_a_read_of_an_attribute_the_dataset_sets_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, extra='self.palette = np.load("palette.npy")') == [("train.py", 21), ("train.py", 22)]


def test_read_under_a_test_may_not_happen(tmp_path: Path) -> None:
    read = "if opts is not None:\n            palette = loader.dataset.palette"
    assert _lint(tmp_path, read=read) == [("train.py", 22), ("train.py", 23)]


def test_attribute_set_from_outside_the_class_is_no_crash(tmp_path: Path) -> None:
    read = "loader.dataset.palette = np.zeros((50, 3))\n        palette = loader.dataset.palette"
    assert _lint(tmp_path, read=read) == [("train.py", 22), ("train.py", 23)]
