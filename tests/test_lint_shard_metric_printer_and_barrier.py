"""Unreduced shard metric (DDP036) reported through a message built first and handed to a project
printer (`msg = "acc %.3f" % acc; io.cprint(msg)` whose method prints its text), and a metric
returned to a caller that waits at a barrier before rank 0 prints it (a barrier reduces
nothing). Through `ddpcheck lint`, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


PRINTER_SCRIPT = """\
    import os
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class Console:
        def __init__(self, path):
            self.file = open(path, "a")

        def cprint(self, text):
            print(text)
            self.file.write(text + "\\n")


    def run(opts, io):
        gpu = int(os.environ["LOCAL_RANK"])
        net = DistributedDataParallel(Net().cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.SGD(net.parameters(), lr=opts.lr)
        train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=32, sampler=DistributedSampler(val_set, shuffle=False))
        for epoch in range(opts.epochs):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            labels, preds = [], []
            with torch.no_grad():
                for x, y in val_loader:
                    preds.append(net(x.cuda()).argmax(1).cpu().numpy())
                    labels.append(y.numpy())
            {gather}
            acc = (np.concatenate(preds) == np.concatenate(labels)).mean()
            if gpu == 0:
                msg = "epoch %d val acc %.4f" % (epoch, acc)
                io.cprint(msg)


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        run(parse(), Console("run.log"))
"""


def test_message_handed_to_a_project_printer_is_reported(tmp_path: Path) -> None:
    files = {"train.py": PRINTER_SCRIPT.format(gather="pass")}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 39)]


def test_message_of_gathered_predictions_is_clean(tmp_path: Path) -> None:
    # The lists are gathered from every rank before the accuracy is computed.
    gather = ("preds = [p for part in gather_all(preds) for p in part]; "
              "labels = [t for part in gather_all(labels) for t in part]")
    source = PRINTER_SCRIPT.format(gather=gather) + """
    def gather_all(items):
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, items)
        return out
"""
    assert lines(tmp_path, {"train.py": source}, "DDP036") == []


BARRIER_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def evaluate(rank, net, loader):
        total = 0.0
        with torch.no_grad():
            for x, y in loader:
                total += (net(x.to(rank)).argmax(1) == y.to(rank)).float().mean().item()
        return total / len(loader)


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        net = DistributedDataParallel(Net().to(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        train_loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))
        for epoch in range(50):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(net(x.to(rank)), y.to(rank))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            score = evaluate(rank, net, val_loader)
            {sync}
            if rank == 0:
                print(f"val score {{score}}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        torch.multiprocessing.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
"""


def test_returned_metric_printed_after_a_barrier_is_reported(tmp_path: Path) -> None:
    files = {"train.py": BARRIER_SCRIPT.format(sync="dist.barrier()")}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 31)]


def test_returned_metric_all_reduced_before_the_print_is_clean(tmp_path: Path) -> None:
    sync = ("score = torch.tensor(score, device=rank); dist.all_reduce(score); "
            "score = score.item() / dist.get_world_size()")
    files = {"train.py": BARRIER_SCRIPT.format(sync=sync)}
    assert lines(tmp_path, files, "DDP036") == []
