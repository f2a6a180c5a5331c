"""Rank conditions: which `if` tests restrict code to the main rank, and which only ask
"distributed or not" (YOLO's `RANK != -1`), which every rank answers alike."""

from __future__ import annotations

import libcst as cst
import pytest

from ddpcheck.lint.model.conditions import NamesOnly, is_distributed_test, selects_main_rank

# API names only: the value flow knows nothing here.
_resolve = NamesOnly(lambda expr: None)


@pytest.mark.parametrize("test,expected", [
    ("rank == 0", True),
    ("dist.get_rank() == 0", True),
    ("RANK in {-1, 0}", True),
    ("args.local_rank in [-1, 0]", True),
    ("rank != 0", False),
    ("LOCAL_RANK not in (-1, 0)", False),
    ("RANK != -1", None),  # launched distributed: every rank
    ("LOCAL_RANK == -1", None),  # not launched distributed: the only process
    ("local_rank in (-1,)", None),
    ("world_size > 1", None),
    # Not launched distributed (the only process), or rank 0 of the job.
    ("args.local_rank == -1 or dist.get_rank() == 0", True),
    ("torch.cuda.device_count() < 2 or rank == 0", True),
    ("args.local_rank == -1 or args.save", None),
])
def test_selects_main_rank(test, expected):
    assert selects_main_rank(cst.parse_expression(test), _resolve) is expected


@pytest.mark.parametrize("test,expected", [
    ("args.distributed", True),
    ("not args.distributed", False),
    ("world_size == 1", False),
    ("args.distributed and args.shard", True),  # holds only in distributed runs
    # Holds outside distributed runs, and in distributed runs without the shard option: neither.
    ("not (args.distributed and args.shard)", None),
    ("not (args.distributed and world_size > 1)", False),
    ("not (args.distributed or world_size > 1)", False),
])
def test_is_distributed_test(test, expected):
    assert is_distributed_test(cst.parse_expression(test), _resolve) is expected
