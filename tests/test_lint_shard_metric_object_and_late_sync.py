"""DDP036 through `ddpcheck lint`: figures computed by a project object built from the lists an
evaluation loop collected (`Scorer(truths, guesses).summary()`), and a collective that only
comes after the report (a detection evaluator synchronised after the figures were printed)."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

ENGINE = """\
import torch


@torch.no_grad()
def run_validation(net, loader, box_eval):
    net.eval()
    truths = []
    guesses = []
    for images, labels in loader:
        scores = net(images.cuda())
        for label, score in zip(labels, scores):
            truths.append(label)
            guesses.append(score.argmax())
{compute}
    print("validation:", figures)
{after}    return figures
"""

SCORING = """\
import torch.distributed as dist


class Scorer:
    def __init__(self, truths, guesses):
        self.truths = truths
        self.guesses = guesses

    def summary(self):
        hits = sum(int(t == g) for t, g in zip(self.truths, self.guesses))
{sync}        return {{"accuracy": hits / max(len(self.truths), 1)}}


class BoxEval:
    def __init__(self):
        self.rows = []

    def sync(self):
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, self.rows)
        self.rows = [r for p in parts for r in p]
"""

MAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from engine import run_validation
from scoring import BoxEval


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    val_loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False),
                            drop_last=False)
    net = DDP(torch.nn.Linear(8, 3).cuda(), device_ids=[local_rank])
    run_validation(net, val_loader, BoxEval())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

CHAINED = "    figures = Scorer(truths, guesses).summary()"
BOUND = "    scorer = Scorer(truths, guesses)\n    figures = scorer.summary()"
LATE = "    box_eval.sync()\n"
GATHER = ("        parts = [None] * dist.get_world_size()\n"
          "        dist.all_gather_object(parts, self.guesses)\n")


def _lint(tmp_path, compute: str = CHAINED, after: str = LATE, sync: str = "") -> set[tuple[str, int, str]]:
    engine = ENGINE.format(compute=compute, after=after)
    if "Scorer" in compute:
        engine = "from scoring import Scorer\n" + engine
    _write(tmp_path, {"train.py": MAIN, "engine.py": engine, "scoring.py": SCORING.format(sync=sync)})
    return _findings(tmp_path, "train.py", select="DDP036")


def test_figures_of_an_object_built_from_the_lists_are_reported_at_the_print(tmp_path):
    # The evaluator synchronised after the print comes too late for the printed figures.
    assert _lint(tmp_path) == {("engine.py", 16, "DDP036")}


def test_an_object_bound_to_a_name_then_read_is_reported_the_same(tmp_path):
    assert _lint(tmp_path, compute=BOUND) == {("engine.py", 17, "DDP036")}


def test_a_collective_before_the_print_still_reduces_everything(tmp_path):
    # A project method handed nothing that makes a collective, before the report: taken to reduce.
    compute = "    box_eval.sync()\n" + CHAINED
    assert _lint(tmp_path, compute=compute, after="") == set()


def test_an_object_whose_method_gathers_is_clean(tmp_path):
    assert _lint(tmp_path, sync=GATHER) == set()


def test_a_print_naming_the_rank_before_the_collective_is_not_the_report(tmp_path):
    compute = CHAINED + "\n    print(f'rank {dist.get_rank()}:', figures)\n    box_eval.sync()"
    engine_after = ""
    found = _lint(tmp_path, compute="    import torch.distributed as dist\n" + compute, after=engine_after)
    # The rank's own figure, named as such, then a collective handed nothing (taken to reduce
    # everything) before the next print: silent.
    assert found == set()
