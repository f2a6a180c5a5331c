"""DDP011 where a whole pickled model is loaded and handed to a training function that batches
other data (the function builds a DataLoader, but of its other argument: the model is no data),
and where the run's mode is a string option (`--parallel DDP`) tested again further down: the
`else` of the same test as the set-up's is the single-process run. Through `ddpcheck lint
--select DDP011`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


RUN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader


    def fit(net, corpus, optimizer, args):
        batches = DataLoader(corpus, batch_size=args.batch_size)
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def run_main(args, rank=None):
        corpus = torch.load("corpus_tokens.pt")
        if args.resume:
            net = torch.load(args.resume)
        else:
            net = torch.nn.Linear(64, 8)
        if args.parallel == "DDP":
            net = DDP(net.to(rank), device_ids=[rank])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        fit(net, corpus, optimizer, args)
        if args.parallel == "DDP":
            dist.barrier()
        else:
            net = torch.load("final.pt")


    def worker(rank, args):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29500"
        dist.init_process_group("nccl", rank=rank, world_size=args.world_size)
        run_main(args, rank)
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--parallel", type=str, default="None")
        parser.add_argument("--resume", type=str, default="")
        parser.add_argument("--world_size", type=int, default=2)
        parser.add_argument("--batch_size", type=int, default=16)
        args = parser.parse_args()
        if args.parallel == "DDP":
            mp.spawn(worker, args=(args,), nprocs=args.world_size)
        else:
            run_main(args)
"""


def test_model_handed_to_a_function_batching_other_data_is_a_checkpoint(tmp_path: Path) -> None:
    # Line 23: the pickled model every spawned rank loads; line 33, the `else` of the mode test,
    # runs in the single process only.
    assert lines(tmp_path, {"train.py": RUN}, "DDP011") == [("train.py", 23)]


def test_data_handed_to_the_loader_it_builds_stays_clean(tmp_path: Path) -> None:
    files = {"train.py": RUN.replace('"corpus_tokens.pt"', "args.corpus").replace(
        "            net = torch.load(args.resume)\n", "            net = torch.load(args.resume, map_location='cpu')\n")}
    files["train.py"] = files["train.py"].replace(
        '    parser.add_argument("--resume"', '    parser.add_argument("--corpus", type=str, default="c.pt")\n    parser.add_argument("--resume"')
    assert lines(tmp_path, files, "DDP011") == []


def test_else_of_another_mode_value_is_not_read_as_single(tmp_path: Path) -> None:
    # `if args.parallel == "DP":` is no test of the set-up's mode: its `else` includes the DDP run.
    files = {"train.py": RUN.replace('        if args.parallel == "DDP":\n            dist.barrier()',
                                     '        if args.parallel == "DP":\n            dist.barrier()')}
    assert lines(tmp_path, files, "DDP011") == [("train.py", 23), ("train.py", 33)]
