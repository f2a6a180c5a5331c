"""Each rule reads the model with an evaluation budget of its own. An answer the budget cut short
("not known") must not be kept for the rules that ask after it with a fresh budget: what a rule
reports would then depend on which rules ran before it and how much they spent."""

from __future__ import annotations

from pathlib import Path

from ddpcheck.lint.engine import model_of
from ddpcheck.lint.model.project import Project

SCRIPT = '''\
import torch
import torch.distributed as dist


def checkpoint(model, save=False):
    if save:
        torch.save(model.state_dict(), "model.pt")


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 2)
    checkpoint(model)


if __name__ == "__main__":
    main()
'''


def _the_save(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    model = model_of(str(path), SCRIPT, Project())
    site = next(c for c in model.root.calls if c.dotted == "torch.save")
    return model, site


def test_a_test_read_with_the_budget_spent_is_read_again_with_a_fresh_one(tmp_path: Path) -> None:
    model, site = _the_save(tmp_path)
    guard = site.guards[0]
    model.values.budget = 2  # the asking rule has two evaluation steps left
    assert model.values.outcome(site.module, guard.test, site.scope) is None  # not known: cut short
    model.values.fresh_budget()  # the next rule
    # `save` is False in the only call and by default: the branch never runs.
    assert model.values.outcome(site.module, guard.test, site.scope) is False


def test_the_ranks_a_call_runs_on_are_not_kept_from_a_reading_cut_short(tmp_path: Path) -> None:
    model, site = _the_save(tmp_path)
    model.values.fresh_budget()
    whole = model.paths.ranks(site)
    model, site = _the_save(tmp_path)
    model.values.budget = 2
    model.paths.ranks(site)
    model.values.fresh_budget()
    assert model.paths.ranks(site) == whole
