"""DDP036 through `ddpcheck lint`: predictions a sharded evaluation loop collects and hands,
after the loop, to project metric objects (`calc.step(preds, gts)`, one object per threshold in a
list built by a comprehension), whose figures (`calc.compute()`) are then logged: one shard's."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

METRIC = """\
class Scorer:
    def __init__(self, threshold):
        self.threshold = threshold
        self.reset()

    def step(self, preds, gts):
        for p, g in zip(preds, gts):
            self.pairs[self.seen] = (p, g)
            self.seen += 1

    def compute(self):
{compute}        hits = sum(1 for p, g in self.pairs.values() if abs(p - g) < self.threshold)
        return {{"hit_rate": hits / max(self.seen, 1)}}

    def reset(self):
        self.pairs = {{}}
        self.seen = 0
"""

MAIN = """\
import logging
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from metric import Scorer

log = logging.getLogger("val")


class Frames(Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        return torch.zeros(4), 0.0


def validate(loader, model, thresholds):
    scorers = [Scorer(t) for t in thresholds]
    kept = {{"pred": [], "gt": []}}
    model.eval()
    for x, y in loader:
        with torch.no_grad():
            out = model(x.cuda())
        kept["pred"].append(out.squeeze(1).tolist())
        kept["gt"].append(y.tolist())
{gather}    for preds, gts in zip(kept["pred"], kept["gt"]):
        for scorer in scorers:
            scorer.step(preds, gts)
    for i, scorer in enumerate(scorers):
        log.info(f"threshold {{thresholds[i]}}")
        figures = scorer.compute()
        for name in figures:
            log.info(f"{{name}} {{figures[name]:.3f}}")


def main():
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    frames = Frames()
    loader = DataLoader(frames, batch_size=16, sampler=DistributedSampler(frames, shuffle=False))
    model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[rank])
    validate(loader, model, [0.25, 0.5])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

GATHER = """\
    merged = [None] * dist.get_world_size()
    dist.all_gather_object(merged, kept)
    kept = {"pred": [p for part in merged for p in part["pred"]], "gt": [g for part in merged for g in part["gt"]]}
"""


def _lint(tmp_path, compute: str = "", gather: str = "") -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": MAIN.format(gather=gather), "metric.py": METRIC.format(compute=compute)})
    return _findings(tmp_path, "train.py", select="DDP036")


def test_figures_of_objects_fed_the_collected_predictions_are_one_shard(tmp_path):
    # The threshold line before it reports the index `enumerate` counts, not a figure.
    assert _lint(tmp_path) == {("train.py", 39, "DDP036")}


def test_objects_whose_compute_gathers_across_ranks_are_clean(tmp_path):
    compute = "        import torch.distributed as dist\n        dist.barrier()\n" \
              "        everything = [None] * dist.get_world_size()\n" \
              "        dist.all_gather_object(everything, self.pairs)\n"
    assert _lint(tmp_path, compute=compute) == set()


def test_predictions_gathered_before_the_objects_are_fed_are_clean(tmp_path):
    assert _lint(tmp_path, gather=GATHER) == set()
