"""DDP failures users hit often, on real 2-rank gloo jobs through `python -m ddpcheck run`: reentrant
checkpointing named as the cause of what it broke, the parameters behind "Expected to have finished
reduction" by name, find_unused_parameters=True for nothing with its measured cost, and random
augmentation that repeats across DataLoader workers, epochs and ranks."""

from __future__ import annotations

import pytest

from rt_helpers import FIXTURES, run_ddpcheck

pytestmark = pytest.mark.slow


def _finding(result, code: str) -> dict:
    return next(f for f in result.report["findings"] if f["code"] == code)


def test_reentrant_checkpointing_is_named_as_the_cause_of_the_gradient_mismatch_and_the_crash(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "checkpoint_ddp.py"), "--case", "stem"], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]  # the script's own failure
    assert result.codes == {"DDP145"}, result.report["findings"]
    message = _finding(result, "DDP145")["message"]
    assert "checkpoint_ddp.py:" in message and "use_reentrant=not given, so True" in message
    assert "gradients differed across ranks at optimizer step 1" in message
    assert "Expected to have finished reduction" in message
    assert "None of the checkpointed function's inputs required grad" in message
    assert "use_reentrant=False" in message
    # What it caused is folded into it: one fault, one finding.
    for code in ("DDP105", "DDP112", "DDP146"):
        assert result.check(code)["explained_by"] == "DDP145", code


def test_the_parameters_behind_an_unfinished_reduction_are_named(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "unused_branch.py")], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.codes == {"DDP146"}, result.report["findings"]
    finding = _finding(result, "DDP146")
    assert finding["details"]["parameters"] == ["aux_head.weight", "aux_head.bias"]
    assert "after optimizer step 1" in finding["message"] and finding["ranks"] == [0, 1]
    assert result.check("DDP112")["explained_by"] == "DDP146"


def test_find_unused_parameters_for_nothing_is_reported_with_its_measured_cost(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "find_unused_everywhere.py"), "--steps", "24"], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    finding = _finding(result, "DDP144")
    details = finding["details"]
    assert details["steps"] == 20  # every step of the default --check-first 20 was watched
    assert details["walk_s"] > 0 and 0 < details["share"] < 1
    assert f"{details['share']:.1%} of the median step" in finding["message"]
    assert result.status("DDP112") == "pass"


def test_a_generator_held_by_the_dataset_repeats_in_every_worker_epoch_and_rank(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "augment_rng.py")], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.codes == {"DDP147"}
    finding = _finding(result, "DDP147")
    assert "`rng` (numpy.random.Generator" in finding["message"]
    for said in ("workers 0 and 1", "every epoch", "ranks 0 and 1"):
        assert said in finding["message"], said
    # DDP148: the ranks share their base seeds here too, but __getitem__ never drew from the
    # global generators, so nothing repeats through them.
    assert result.status("DDP148") == "pass"


def test_identical_worker_seeds_on_every_rank_repeat_the_global_random_draws(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "augment_rng.py"), "--global"], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.codes == {"DDP148"}
    assert "draws from `torch`" in _finding(result, "DDP148")["message"]
    assert result.status("DDP147") == "pass"
