"""Classes chosen at run time, through `ddpcheck lint`: a variable that holds one of several
experiment classes (`Exp = ForecastExp` / `Exp = ImputeExp`, then `Exp(args).fit()`) and a table
of backend classes looked up by a command-line value (`BACKENDS[args.backend](args)`). The run
goes through each class the call may build, so the checkpoint and resume code in their methods
is checked as if the class were named. The same run wrapped in a class-based context manager that
sends other ranks' stdout to /dev/null prints once."""

from __future__ import annotations

import textwrap

from tests.helpers import finding_set as _findings
from tests.helpers import write_project as _write


def _variant(text: str, old: str, new: str) -> str:
    """`text` with `old` replaced by `new`: old must be there, and the result must parse."""
    assert old in text, old
    text = text.replace(old, new)
    compile(textwrap.dedent(text), "variant", "exec")
    return text

CALLBACKS = """\
    import os

    import torch


    class BestModelKeeper:
        def __init__(self, patience=5):
            self.patience = patience
            self.best = None
            self.bad_epochs = 0

        def __call__(self, val_loss, model, out_dir):
            if self.best is None or val_loss < self.best:
                self.best = val_loss
                self.bad_epochs = 0
                self._keep(model, out_dir)
            else:
                self.bad_epochs += 1

        def _keep(self, model, out_dir):
            torch.save(model.state_dict(), os.path.join(out_dir, "best.pt"))
    """

FORECAST = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from callbacks import BestModelKeeper


    class ForecastExp:
        def __init__(self, args):
            self.args = args
            self.model = DDP(build_net(args).cuda(args.local_rank), device_ids=[args.local_rank])

        def fit(self, loader, out_dir):
            keeper = BestModelKeeper()
            opt = torch.optim.Adam(self.model.parameters(), lr=self.args.lr)
            for epoch in range(self.args.epochs):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                keeper(evaluate(self.model), self.model, out_dir)
    """

CLASSIFY = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class ClassifyExp:
        def __init__(self, args):
            self.args = args
            self.model = DDP(build_net(args).cuda(args.local_rank), device_ids=[args.local_rank])

        def fit(self, loader, out_dir):
            opt = torch.optim.SGD(self.model.parameters(), lr=self.args.lr)
            for epoch in range(self.args.epochs):
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(self.model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    """

RUN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist

    from forecast import ForecastExp
    from classify import ClassifyExp

    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="forecast")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    args.local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)

    if args.task == "forecast":
        Exp = ForecastExp
    elif args.task == "classify":
        Exp = ClassifyExp
    else:
        raise ValueError(args.task)

    exp = Exp(args)
    exp.fit(make_loader(args), "checkpoints")
    dist.destroy_process_group()
    """


def test_a_callback_object_of_a_class_held_in_a_variable_saves_on_every_rank(tmp_path):
    _write(tmp_path, {"callbacks.py": CALLBACKS, "forecast.py": FORECAST, "classify.py": CLASSIFY, "run.py": RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == {("callbacks.py", 21, "DDP010")}


def test_the_same_callback_called_on_rank_zero_only_is_clean(tmp_path):
    guarded = _variant(
        FORECAST,
        "                keeper(evaluate(self.model), self.model, out_dir)",
        "                if torch.distributed.get_rank() == 0:\n"
        "                    keeper(evaluate(self.model), self.model, out_dir)")
    _write(tmp_path, {"callbacks.py": CALLBACKS, "forecast.py": guarded, "classify.py": CLASSIFY, "run.py": RUN})
    assert _findings(tmp_path, "run.py", select="DDP010") == set()


def test_a_class_variable_that_may_hold_something_unknown_is_not_followed(tmp_path):
    # `Exp = getattr(experiments, name)`: the model cannot tell which class runs.
    unknown = _variant(RUN, "    else:\n        raise ValueError(args.task)\n",
                          "    else:\n        Exp = getattr(experiments, args.task)\n")
    _write(tmp_path, {"callbacks.py": CALLBACKS, "forecast.py": FORECAST, "classify.py": CLASSIFY, "run.py": unknown})
    assert _findings(tmp_path, "run.py", select="DDP010") == set()


BACKENDS = """\
    import os

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    class NcclBackend:
        def __init__(self, args):
            self.local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl")

        def wrap(self, model):
            return DistributedDataParallel(model, device_ids=[self.local_rank])

        def is_main(self):
            return dist.get_rank() == 0


    class LocalBackend:
        def __init__(self, args):
            pass

        def wrap(self, model):
            return model

        def is_main(self):
            return True


    BACKENDS = {"nccl": NcclBackend, None: LocalBackend}


    def make_backend(args):
        return BACKENDS[args.backend](args)
    """

TRAIN = """\
    import argparse
    import os

    import torch

    from backends import make_backend


    def main(args):
        backend = make_backend(args)
        model = backend.wrap(build_model(args).cuda())
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        last = os.path.join(args.out, "last.pt")
        if os.path.exists(last):
            state = torch.load(last)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
        for step, batch in enumerate(make_batches(args)):
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--backend", default=None)
        parser.add_argument("--lr", type=float, default=3e-4)
        parser.add_argument("--out", default="runs")
        main(parser.parse_args())
    """


def test_a_backend_built_from_a_table_of_classes_makes_the_script_a_ddp_script(tmp_path):
    _write(tmp_path, {"backends.py": BACKENDS, "train.py": TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP011") == {("train.py", 15, "DDP011")}


def test_the_resume_with_a_map_location_is_clean(tmp_path):
    fixed = _variant(TRAIN, "torch.load(last)", 'torch.load(last, map_location="cpu")')
    _write(tmp_path, {"backends.py": BACKENDS, "train.py": fixed})
    assert _findings(tmp_path, "train.py", select="DDP011") == set()


QUIET = """\
    import os
    import sys


    class QuietOnOtherRanks:
        def __init__(self, rank):
            self.rank = rank

        def __enter__(self):
            if self.rank == 0:
                return
            self._stdout = sys.stdout
            sys.stdout = open(os.devnull, "w")

        def __exit__(self, *exc):
            if self.rank == 0:
                return
            sys.stdout.close()
            sys.stdout = self._stdout
    """

QUIET_RUN = """\
    import os

    import torch.distributed as dist

    from forecast import ForecastExp
    from quiet import QuietOnOtherRanks

    args = parse_args()
    args.local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    with QuietOnOtherRanks(args.local_rank):
        exp = ForecastExp(args)
        for run in range(3):
            print(f"run {run}: training")
            exp.fit(make_loader(args), "checkpoints")
    """


def test_prints_inside_a_block_that_sends_stdout_of_other_ranks_away_are_printed_once(tmp_path):
    _write(tmp_path, {"callbacks.py": CALLBACKS, "forecast.py": FORECAST, "quiet.py": QUIET, "run.py": QUIET_RUN})
    assert _findings(tmp_path, "run.py", select="DDP020") == set()
    loud = _variant(QUIET_RUN, "    with QuietOnOtherRanks(args.local_rank):\n", "    if True:\n")
    _write(tmp_path, {"run.py": loud})
    # (The experiment is built once, before the loop: a loop that built a fresh DDP model at
    # each pass would repeat whole runs, and its message would come once per run.)
    assert ("run.py", 14, "DDP020") in _findings(tmp_path, "run.py", select="DDP020")
