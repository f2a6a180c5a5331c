"""Every-rank output (DDP020) and constant learning rates (DDP004) on mechanisms seen on public
scripts of batch 22: an epoch-end callback that runs the evaluation it was given and prints the
score, messages tagged with the process id, and an optimizer made anew for each batch to fit
that batch alone. Each through `ddpcheck lint` on a small project written in the style of the
scripts, with a variant that tells the mechanism apart."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# An epoch-end callback object: it runs the evaluation function it was built with, keeps the
# best score, and prints. The trainer calls it on every rank after each epoch.
MONITOR = """\
    import logging


    class ScoreMonitor(object):
        def __init__(self, eval_fn, loader, metric, key="acc"):
            self.eval_fn = eval_fn
            self.loader = loader
            self.metric = metric
            self.key = key
            self.best = -1.0

        def __call__(self, epoch, net):
            {body}
            names, values = self.metric.get()
            for n, v in zip(names, values):
                if n == self.key and v > self.best:
                    self.best = v
                    print("new best {{}}: {{}} at epoch {{}}".format(n, v, epoch))
            logging.info("epoch %d best %f", epoch, self.best)
"""

EVALUATE = """\
    import torch


    @torch.no_grad()
    def evaluate(net, loader, metric):
        net.eval()
        metric.reset()
        for batch in loader:
            out = net(batch[0].cuda())
            metric.update(out, batch[1])
"""

FIT = """\
    def fit(net, optimizer, loader, sampler, begin, end, monitor=None):
        for epoch in range(begin, end):
            sampler.set_epoch(epoch)
            net.train()
            for x, y in loader:
                loss = net(x.cuda()).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if monitor is not None:
                monitor(epoch, net)
"""

MONITOR_SCRIPT = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from monitor import ScoreMonitor
    from evaluate import evaluate
    from trainer import fit
    from metrics import Accuracy


    def main():
        logging.basicConfig(level=logging.INFO)
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(net.parameters(), lr=float(os.environ["LR"]))
        data = list(range(64))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        val_loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
        monitor = ScoreMonitor({eval_fn}, val_loader, Accuracy())
        fit(net, optimizer, loader, sampler, 0, 10, monitor=monitor)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

METRICS = """\
    class Accuracy(object):
        def reset(self):
            self.hits = 0

        def update(self, out, labels):
            self.hits += int((out.argmax(1) == labels).sum())

        def get(self):
            return ["acc"], [self.hits]
"""


def _monitor_files(body: str, eval_fn: str = "evaluate") -> dict[str, str]:
    return {"monitor.py": MONITOR.format(body=body), "evaluate.py": EVALUATE, "trainer.py": FIT,
            "metrics.py": METRICS, "train.py": MONITOR_SCRIPT.format(eval_fn=eval_fn)}


def test_validation_callback_that_evaluates_is_reported_at_its_output(tmp_path: Path) -> None:
    # The callback runs the evaluation on every rank: a guard around its call would skip it on
    # the other ranks, so each message is reported where it is written, the best-score one
    # under its test on a metric name too (printed at every epoch the score improves).
    files = _monitor_files("self.eval_fn(net, self.loader, self.metric)")
    assert lines(tmp_path, files, "DDP020") == [("monitor.py", 18), ("monitor.py", 19)]


def test_callback_that_only_prints_is_reported_at_its_call(tmp_path: Path) -> None:
    # No evaluation in it: a printer, guarded where the trainer calls it.
    files = _monitor_files("pass")
    assert lines(tmp_path, files, "DDP020") == [("trainer.py", 11)]


# A memory report called at each step: its line carries the process id.
MEMORY_UTIL = """\
    import os
    import torch


    def show_memory(device, prompt=""):
        used = torch.cuda.memory_allocated() / 2 ** 20
        print(f"[MEM-{tag}-{{device}}] {{used:.1f}}M ({{prompt}})")
"""

MEMORY_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from util import show_memory


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).to(device), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=float(os.environ["LR"]))
        data = list(range(64))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        for epoch in range(5):
            sampler.set_epoch(epoch)
            for x, y in loader:
                show_memory(device, "before forward")
                loss = model(x.to(device)).sum()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_message_tagged_with_the_process_id_is_clean(tmp_path: Path) -> None:
    files = {"util.py": MEMORY_UTIL.format(tag="{os.getpid()}"), "train.py": MEMORY_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == []


def test_untagged_memory_report_is_reported_at_its_call(tmp_path: Path) -> None:
    # (Without the device either: `torch.device("cuda", local_rank)` names the rank's own GPU.)
    files = {"util.py": MEMORY_UTIL.format(tag="mem").replace("-{device}]", "]"), "train.py": MEMORY_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 21)]


# A per-batch fit of its own (a global alignment of the points the model predicts): the project
# function builds an Adam over the fit's own parameters and runs its steps.
ALIGN = """\
    import torch


    def align(points, lr=0.01, niter=100):
        offset = torch.nn.Parameter(torch.zeros(3, device=points.device))
        optimizer = torch.optim.Adam([offset], lr=lr)
        for _ in range(niter):
            loss = ((points + offset) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return offset.detach()
"""

ALIGN_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from align import align


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=1e-4)
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 3).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        data = torch.randn(64, 3)
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        {before}
        for epoch in range(5):
            sampler.set_epoch(epoch)
            for batch in loader:
                points = model(batch.cuda())
                {inside}
                loss = points.pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_optimizer_made_for_each_batch_is_clean(tmp_path: Path) -> None:
    files = {"align.py": ALIGN,
             "train.py": ALIGN_SCRIPT.format(before="pass", inside="shift = align(points.detach(), lr=0.01)")}
    assert lines(tmp_path, files, "DDP004") == []


def test_same_fit_made_once_before_training_is_reported(tmp_path: Path) -> None:
    # Made once, outside the loop over batches: read as any other optimizer of the script.
    files = {"align.py": ALIGN,
             "train.py": ALIGN_SCRIPT.format(before="shift = align(data.cuda(), lr=0.01)", inside="pass")}
    assert lines(tmp_path, files, "DDP004") == [("train.py", 21)]


LAZY_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model, loader):
            self.model = model
            self.loader = loader
            self.optimizer = None

        def fit(self, epochs):
            for epoch in range(epochs):
                for x in self.loader:
                    if self.optimizer is None:
                        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                    loss = self.model(x.cuda()).sum()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 3).cuda(), device_ids=[local_rank])
        data = torch.randn(64, 3)
        Trainer(model, DataLoader(data, batch_size=4, sampler=DistributedSampler(data))).fit(5)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_optimizer_made_at_the_first_step_and_kept_is_reported(tmp_path: Path) -> None:
    # Built inside the loop over batches but kept on the trainer: made once, then trained with.
    assert lines(tmp_path, {"train.py": LAZY_SCRIPT}, "DDP004") == [("train.py", 17)]
