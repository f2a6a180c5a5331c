"""A seed set in the process that only launches the workers, through `ddpcheck lint --select
DDP029`: a script no outside launcher can start, whose own path (`main()` choosing between
`mp.spawn(worker)`, a pool of cross-validation folds and a single-GPU run, or a test mode) never
sets up a process group, seeds no rank; the spawned workers start afresh. A seed inside the
worker, or a launcher that joins a process group itself, is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP029") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def join_group(rank, world):
        dist.init_process_group("gloo", rank=rank, world_size=world)


    def run_rank(rank, net, opts, corpus):
        join_group(rank, opts.gpus)
        model = DistributedDataParallel(net)
        loader = DataLoader(corpus, sampler=DistributedSampler(corpus), batch_size=8, num_workers=4)
        for batch in loader:
            model(batch).sum().backward()


    def run_single(net, opts, corpus):
        loader = DataLoader(corpus, shuffle=True, batch_size=8)
        for batch in loader:
            net(batch).sum().backward()


    def run_fold(fold, net, opts, corpus):
        run_single(net, opts, corpus)
"""

LAUNCHER = """\
    import argparse
    import random

    import numpy as np
    import torch
    import torch.multiprocessing as mp

    from trainer import run_fold, run_rank, run_single


    def build(opts):
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.2))


    def train(opts, folds=False):
        random.seed(opts.seed)
        np.random.seed(opts.seed)
        torch.manual_seed(opts.seed)
        net = build(opts)
        corpus = torch.load(opts.data)
        if opts.gpus > 1:
            if folds:
                with mp.Pool(4) as pool:
                    pool.starmap(run_fold, [(i, net, opts, corpus) for i in range(4)])
            else:
                mp.spawn(run_rank, args=(net, opts, corpus), nprocs=opts.gpus, join=True)
        else:
            run_single(net, opts, corpus)


    def check_invariance(opts):
        torch.manual_seed(1234)
        net = build(opts)
        print(net(torch.randn(2, 8)))


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--gpus", type=int, default=2)
        parser.add_argument("--data", default="corpus.pt")
        parser.add_argument("--mode", default="train")
        opts = parser.parse_args()
        if opts.mode == "train":
            train(opts)
        elif opts.mode == "folds":
            train(opts, folds=True)
        else:
            check_invariance(opts)
"""


def test_seeds_on_the_launchers_own_path_reach_no_rank(tmp_path: Path) -> None:
    files = {"train.py": LAUNCHER, "trainer.py": TRAINER}
    assert _lines(lint_project(tmp_path, files, "train.py", "trainer.py", select="DDP029")) == []


def test_a_seed_inside_the_spawned_worker_is_reported(tmp_path: Path) -> None:
    seeded = TRAINER.replace("        join_group(rank, opts.gpus)\n",
                             "        join_group(rank, opts.gpus)\n        torch.manual_seed(opts.seed)\n")
    files = {"train.py": LAUNCHER, "trainer.py": seeded}
    assert _lines(lint_project(tmp_path, files, "train.py", "trainer.py", select="DDP029")) == [("trainer.py", 13)]


def test_a_launcher_that_joins_a_group_itself_is_a_rank(tmp_path: Path) -> None:
    # The launching process runs a rank itself on the other arm (`run_rank(0, ...)` with the
    # world size from the command line): its seed is every such process's.
    joined = LAUNCHER.replace("            run_single(net, opts, corpus)", "            run_rank(0, net, opts, corpus)")
    files = {"train.py": joined, "trainer.py": TRAINER}
    found = _lines(lint_project(tmp_path, files, "train.py", "trainer.py", select="DDP029"))
    assert ("train.py", 18) in found
