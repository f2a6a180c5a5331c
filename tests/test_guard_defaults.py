"""A guard on a flag that every run leaves false is taken by no run: what it guards is not
reported, whichever false literal the default is written with."""

from __future__ import annotations

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.rules import rule_classes

SCRIPT = '''
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, optimizer, verbose={default}):
    for batch in loader:
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        if verbose:
            print(f"loss {{loss.item()}}")


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, [torch.randn(2, 4)], optimizer)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''
PRINT_LINE = 13
RULES = tuple(r for r in rule_classes() if r.code == "DDP020")


def _print_findings(default: str) -> list[tuple[str, int | None]]:
    source = SCRIPT.format(default=default)
    return [(f.code, f.line) for f in lint_source("train.py", source, RULES)]


@pytest.mark.parametrize("default", ["False", "None", "0", '""'])
def test_a_print_under_a_flag_no_run_sets_is_not_reported(default):
    assert _print_findings(default) == []


@pytest.mark.parametrize("default", ["True", "1", '"yes"'])
def test_a_print_under_a_flag_that_is_on_by_default_is_reported(default):
    assert _print_findings(default) == [("DDP020", PRINT_LINE)]
