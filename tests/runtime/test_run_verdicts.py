"""Verdicts across ranks from hand-made rank records (the shapes REPORT.md documents), for what a
CPU machine cannot produce for real: several GPUs. Quick; no processes."""

from __future__ import annotations

import pytest

from ddpcheck.run.checks import lifecycle
from ddpcheck.run.verdict import Context


def _record(rank: int, device: str, visible: int, uuid: str | None = None) -> dict:
    ddp = {"index": 0, "params": ["w"], "device": device, "device_ids": [], "forwards": 3,
           "find_unused_parameters": False, "cuda_devices": visible, "gpu_uuid": uuid}
    section = {"init": True, "backend": "nccl", "ddp": [ddp], "destroyed": True,
               "ended": "destroy_process_group", "host": "node0", "grad_seen": ["w"]}
    return {"rank": rank, "local_rank": rank, "status": "finished", "exit_code": 0,
            "probes": {"lifecycle": section}}


def _device_verdict(records):
    return next(v for v in lifecycle.judge(records, Context(len(records), 20, 50)) if v.code == "DDP110")


@pytest.mark.parametrize(("records", "status", "says"), [
    ([_record(0, "cuda:0", 2), _record(1, "cuda:1", 2)], "pass", "one device per rank"),
    ([_record(0, "cuda:0", 2), _record(1, "cuda:0", 2)], "fail", "rank 1 shares cuda:0 with rank 0"),
    ([_record(0, "cuda:1", 2), _record(1, "cuda:0", 2)], "fail", "rank 0 uses cuda:1 but its LOCAL_RANK is 0"),
    # each rank sees only its own GPU (CUDA_VISIBLE_DEVICES): cuda:0 everywhere is right
    ([_record(0, "cuda:0", 1, "GPU-a"), _record(1, "cuda:0", 1, "GPU-b")], "pass", "one device per rank"),
    ([_record(0, "cpu", 0), _record(1, "cpu", 0)], "skip", "no CUDA model"),
])
def test_each_rank_on_its_own_gpu(records, status, says):
    verdict = _device_verdict(records)
    assert verdict.status == status
    assert says in verdict.detail


def _loader(index: int, order: list[int]) -> dict:
    epoch = {"sampler_epoch": 0, "count": len(order), "complete": True, "head": order,
             "crc": hash(tuple(order)) & 0xFFFFFFFF, "indices": None, "step": 0}
    return {"index": index, "name": None, "site": "train.py:12", "epochs": [epoch],
            "dataset_len": 16, "iterable": False, "sampler": "DistributedSampler",
            "distributed": True, "shuffle": True, "batch_size": 4, "drop_last": False}


@pytest.mark.parametrize(("second", "status"), [([3, 1, 0, 2, 7, 5], "fail"), ([5, 2, 7, 0, 1, 3], "pass")])
def test_a_new_loader_per_epoch_at_the_same_line_counts_as_the_next_epoch(second, status):
    from ddpcheck.run.checks import set_epoch

    records = [{"rank": r, "probes": {"shards": {"loaders": [_loader(0, [3, 1, 0, 2, 7, 5]),
                                                             _loader(1, second)]}}} for r in (0, 1)]
    (verdict,) = set_epoch.judge(records, Context(2, 20, 50))
    assert verdict.status == status
