"""Output on every rank (DDP020): a loop that repeats whole runs (each iteration builds and wraps a
fresh model, then trains it through its own epoch loop) is no epoch loop, so a report it makes
once per run is not a per-epoch repeat; and `run.log(...)` on the run object `wandb.init(...)`
returned is the same as `wandb.log` on that run. Each through `ddpcheck lint`, with clean
variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# An experiment class whose constructor builds the model and wraps it in DDP; the script runs
# `--itr` repetitions of the whole experiment.
EXPERIMENT = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class Experiment:
        def __init__(self, opts):
            self.opts = opts
            self.net = DistributedDataParallel(torch.nn.Linear(8, 1).cuda(opts.gpu), device_ids=[opts.gpu])
            self.optimizer = torch.optim.Adam(self.net.parameters(), lr=opts.lr)

        def fit(self, data):
            loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
            for epoch in range(self.opts.epochs):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = ((self.net(x.cuda()) - y.cuda()) ** 2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                {epoch_report}

        def score(self, data):
            loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data, shuffle=False))
            errors = []
            with torch.no_grad():
                for x, y in loader:
                    errors.append(((self.net(x.cuda()) - y.cuda()) ** 2).mean().item())
            print("mse", sum(errors) / len(errors))
"""

REPEATS = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from experiment import Experiment

    parser = argparse.ArgumentParser()
    parser.add_argument("--itr", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=10)


    def main():
        opts = parser.parse_args()
        dist.init_process_group("nccl")
        opts.gpu = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(opts.gpu)
        for run in range(opts.itr):
            exp = Experiment(opts)
            exp.fit(train_set)
            print("finished run", run)
            exp.score(test_set)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_reports_of_a_loop_over_whole_runs_are_not_per_epoch(tmp_path: Path) -> None:
    # The print after `fit()` and the score printed by `score()` come once per run; nothing in
    # the epoch loop prints.
    files = {"experiment.py": EXPERIMENT.format(epoch_report="pass"), "train.py": REPEATS}
    assert lines(tmp_path, files, "DDP020") == []


def test_epoch_report_inside_a_repeated_run_is_still_reported(tmp_path: Path) -> None:
    files = {"experiment.py": EXPERIMENT.format(epoch_report='print("epoch", epoch, loss.item())'),
             "train.py": REPEATS}
    assert lines(tmp_path, files, "DDP020") == [("experiment.py", 21)]


# A loop over epochs that calls a training function (no model built in the loop): its own
# per-epoch print repeats on every rank.
EPOCHS = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def fit_one_epoch(net, optimizer, loader):
        for x, y in loader:
            loss = ((net(x.cuda()) - y.cuda()) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss.item()


    def main():
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        net = DistributedDataParallel(torch.nn.Linear(8, 1).cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        for epoch in range(10):
            loss = fit_one_epoch(net, optimizer, loader)
            print("epoch", epoch, loss)


    if __name__ == "__main__":
        main()
"""


def test_epoch_loop_around_a_training_function_is_still_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": EPOCHS}, "DDP020") == [("train.py", 25)]


# wandb started on every rank; the loop logs through the run object it returned.
RUN_OBJECT = """\
    import os
    import torch
    import torch.distributed as dist
    import wandb
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class Workspace:
        def __init__(self, cfg):
            self.cfg = cfg

        def run(self):
            gpu = int(os.environ["LOCAL_RANK"])
            tracker = wandb.init(project="policy", {init_args})
            net = DistributedDataParallel(torch.nn.Linear(8, 2).cuda(gpu), device_ids=[gpu])
            optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
            loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
            step = 0
            for epoch in range(100):
                for obs, act in loader:
                    loss = ((net(obs.cuda()) - act.cuda()) ** 2).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    tracker.log({{"train_loss": loss.item()}}, step=step)
                    step += 1


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        Workspace(None).run()
"""


def test_log_on_the_run_object_of_every_rank_is_reported(tmp_path: Path) -> None:
    files = {"train.py": RUN_OBJECT.format(init_args="config={}")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 26)]


def test_log_on_a_run_switched_off_by_rank_is_clean(tmp_path: Path) -> None:
    # `mode="disabled"` off rank 0: only rank 0's run records anything.
    files = {"train.py": RUN_OBJECT.format(init_args='mode="online" if gpu == 0 else "disabled"')}
    assert lines(tmp_path, files, "DDP020") == []


def test_log_method_of_another_object_is_clean(tmp_path: Path) -> None:
    # A `log` method of something that is not a wandb run (a project recorder, here a list's
    # stand-in) says nothing about the console.
    source = RUN_OBJECT.format(init_args="config={}").replace(
        "tracker.log(", "history.log(").replace("step = 0\n", "step = 0\n            history = Recorder()\n")
    assert lines(tmp_path, {"train.py": source}, "DDP020") == []


# The same network trained on in stages: each pass wraps the network it is handed (pruned a
# little more each level) and trains it; the per-level message repeats within the one run.
STAGES = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class LevelTrainer:
        def __init__(self, net, gpu):
            self.net = DistributedDataParallel(net.cuda(gpu), device_ids=[gpu])
            self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(self.net(x.cuda()), y.cuda())
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.fc(x)


    def main():
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        net = Net()
        loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        for level in range(5):
            prune(net, amount=0.2)
            print("pruned level", level)
            LevelTrainer(net, gpu).fit(loader, 10)


    if __name__ == "__main__":
        main()
"""


def test_loop_over_stages_of_one_network_is_still_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": STAGES}, "DDP020") == [("train.py", 38)]
