"""The model's one question about where code runs — `paths.ranks(call)`: never, single, main,
node, other, every or unknown — asked of calls in code written the ways people write rank
guards. Each call to ask about ends in a `# ranks: ANSWER` comment written by hand."""

from __future__ import annotations

import re
import textwrap

import libcst as cst
import pytest

from ddpcheck.lint.model import Model
from ddpcheck.lint.model.build import build

SOURCE = '''
import functools
import os
import torch
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.tensorboard import SummaryWriter


def only_main(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if int(os.environ.get("RANK", 0)) == 0:
            return fn(*args, **kwargs)
    return wrapper


@only_main
def export(state):
    torch.save(state, "export.pt")  # ranks: main


@rank_zero_only
def log_hparams(args):
    print(args)  # ranks: main


def finish(state, path, save=False, mode="train"):
    if save:
        torch.save(state, path)  # ranks: never
    if mode == "eval":
        print("evaluated")  # ranks: never
    print("finished")  # ranks: every


def helper_nobody_calls():
    print("unused")  # ranks: unknown


class Trainer:
    def __init__(self, args, is_main):
        self.args = args
        self.verbose = is_main
        self.writer = SummaryWriter() if is_main else None

    def fit(self, state):
        if self.writer is not None:
            self.writer.add_scalar("loss", 1.0)  # ranks: main
        if self.verbose:
            print("epoch done")  # ranks: main
        if self.args.local_rank == -1 or dist.get_rank() == 0:
            torch.save(state, "last.pt")  # ranks: main
        if self.args.local_rank == 0:
            print("node leader")  # ranks: node
        if dist.get_rank() != 0:
            print("worker")  # ranks: other
        finish(state, "x.pt")
        export(state)
        log_hparams(self.args)


def main(args):
    if torch.cuda.device_count() > 1:
        dist.init_process_group("nccl")
    else:
        print("one GPU")  # ranks: single
    state = {}
    Trainer(args, is_main=dist.get_rank() == 0).fit(state)
    torch.save(state, "every.pt")  # ranks: every


if __name__ == "__main__":
    main(None)
'''


def _asked() -> list[tuple[int, str]]:
    return [(number, m.group(1)) for number, line in enumerate(SOURCE.splitlines(), 1)
            if (m := re.search(r"# ranks: (\w+)", line))]


@pytest.fixture(scope="module")
def model() -> Model:
    text = textwrap.dedent(SOURCE)
    return Model(build("train.py", text, cst.parse_module(text)), None)


@pytest.mark.parametrize("line,answer", _asked(), ids=lambda v: str(v))
def test_ranks_answers_each_call(model: Model, line: int, answer: str) -> None:
    positions = cst.metadata.MetadataWrapper(model.root.tree, unsafe_skip_copy=True).resolve(
        cst.metadata.PositionProvider)
    on_line = [c for c in model.root.calls if positions[c.node].start.line == line]
    assert on_line, f"no call on line {line}"
    first = min(on_line, key=lambda c: c.index)  # the outermost call of the line comes first
    assert model.paths.ranks(first) == answer
