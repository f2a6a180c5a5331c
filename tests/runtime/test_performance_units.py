"""Where the time goes, from planted per-rank timing records (no processes): the dominant phase, the
straggler and its phase, throughput, and the `--scaling` arithmetic and learning-rate verdict."""

from __future__ import annotations

import pytest

from ddpcheck.errors import UserError
from ddpcheck.run import performance
from ddpcheck.run.launcher import scaling
from ddpcheck.run.launcher.command_line import parse_world_sizes
from ddpcheck.run.checks import timing

COLUMNS = list(timing.COLUMNS)


def _rank(rank: int, n: int = 20, *, data=1000, fwd=5000, bwd=10000, opt=1000, coll=0, other=500,
          ours=0, jitter=0, window=None) -> dict:
    steps = []
    for i in range(n):
        j = (i % 3 - 1) * jitter
        row = [i + 2, 0, data + j, fwd, bwd, opt, coll, 16, ours, 0]
        row[1] = sum(row[2:7]) + other + ours
        steps.append(row)
    sec = {"clock": "wall", "columns": COLUMNS, "steps": steps, "window": window or [1.0, 16 * n, n]}
    return {"rank": rank, "probes": {"timing": sec}}


def test_data_bound_and_compute_bound_get_their_dominant_phase():
    data_bound = performance.summarise([_rank(r, data=80_000, fwd=1000, bwd=3000) for r in range(2)])
    assert data_bound["dominant"]["phase"] == "data" and data_bound["dominant"]["share"] > 0.9
    assert [h["kind"] for h in data_bound["hints"]] == ["data"]
    compute = performance.summarise([_rank(r, data=300, fwd=30_000, bwd=70_000) for r in range(2)])
    assert compute["dominant"]["phase"] == "backward"
    assert compute["hints"] == [] and compute["straggler"] is None


def test_the_straggler_is_the_rank_with_its_own_extra_time_not_the_ones_that_wait():
    # rank 3 spends 50 ms in its own code; ranks 0-2 wait those 50 ms inside backward's reduction
    records = [_rank(r, bwd=10_000 if r == 3 else 60_000, other=50_500 if r == 3 else 500, jitter=300)
               for r in range(4)]
    s = performance.summarise(records)["straggler"]
    assert s["rank"] == 3 and s["phase"] == "other"
    assert s["excess_s"] == pytest.approx(0.050, abs=0.001)
    assert s["others_wait_s"] == pytest.approx(0.050, abs=0.001)


def test_a_slow_input_pipeline_on_one_rank_is_named_as_data():
    records = [_rank(r, data=41_000 if r == 1 else 1000, bwd=10_000 if r == 1 else 50_000) for r in range(2)]
    s = performance.summarise(records)["straggler"]
    assert (s["rank"], s["phase"]) == (1, "data")


def test_noise_between_equal_ranks_is_no_straggler():
    records = [_rank(r, fwd=5000 + 400 * r, bwd=10_000 - 400 * r, jitter=800) for r in range(4)]
    assert performance.summarise(records)["straggler"] is None


def test_ranks_without_a_reduction_show_the_straggler_in_their_step_time():
    records = [_rank(0, fwd=5000), _rank(1, fwd=25_000)]
    s = performance.summarise(records)["straggler"]
    assert (s["rank"], s["phase"]) == (1, "forward")


def test_ddpchecks_own_time_and_the_warm_up_are_left_out():
    rec = _rank(0, ours=30_000)
    rec["probes"]["timing"]["steps"][0][1] += 5_000_000  # a first step 5 s long (start-up)
    perf = performance.summarise([rec])
    assert perf["ranks"][0]["step"]["median"] == pytest.approx(0.0175)  # 17.5 ms without our 30 ms
    assert perf["ranks"][0]["step"]["p90"] == pytest.approx(0.0175)


def test_throughput_and_global_batch_from_the_loaders():
    perf = performance.summarise([_rank(r, window=[2.0, 640, 40]) for r in range(4)])
    assert perf["throughput"] == {"samples_per_s": 1280.0, "global_batch": 64, "ranks_measured": 4}


def test_timing_judge_needs_enough_steps_before_any_finding():
    records = [_rank(r, n=6, data=80_000) for r in range(2)]
    verdicts = {v.code: v for v in timing.judge(records, None)}
    assert {v.status for v in verdicts.values()} == {"skip"}
    records = [_rank(r, n=20, data=80_000) for r in range(2)]
    verdicts = {v.code: v for v in timing.judge(records, None)}
    assert verdicts["DDP141"].status == "fail" and "num_workers" in verdicts["DDP141"].message
    assert verdicts["DDP140"].status == "pass"


def test_scaling_sizes_are_validated():
    assert parse_world_sizes("4,1,2", flag="--scaling", example="1,2,4", at_least=2) == (1, 2, 4)
    for bad in ("1", "1,x", "0,2", ","):
        with pytest.raises(UserError):
            parse_world_sizes(bad, flag="--scaling", example="1,2,4", at_least=2)


def _run(n, tp, gb, lr, opt="SGD"):
    return {"world_size": n, "samples_per_s": tp, "global_batch": gb, "lr": lr, "optimizer": opt, "ok": True}


def test_scaling_efficiency_and_an_unscaled_learning_rate():
    block, verdict = scaling.summarise([_run(2, 700.0, 64, 0.1), _run(1, 400.0, 32, 0.1)])
    one, two = block["runs"]
    assert (one["speedup"], one["efficiency"]) == (1.0, 1.0)
    assert two["speedup"] == pytest.approx(1.75) and two["efficiency"] == pytest.approx(0.875)
    assert verdict.status == "fail" and two["lr_expected"] == pytest.approx(0.2)
    assert "grew 2× (32 → 64)" in verdict.message and "to 0.2" in verdict.message
    assert block["lr_verdict"] == verdict.message


def test_a_learning_rate_scaled_with_the_batch_passes_and_adam_gets_the_square_root_too():
    _block, verdict = scaling.summarise([_run(1, 400.0, 32, 0.1), _run(4, 1200.0, 128, 0.4)])
    assert verdict.status == "pass"
    _block, verdict = scaling.summarise([_run(1, 400.0, 32, 1e-3, "AdamW"), _run(4, 1200.0, 128, 1e-3, "AdamW")])
    assert verdict.status == "fail" and "square-root rule, 2× to 0.002" in verdict.message


class _Event:
    """Stands in for torch.cuda.Event: a time on the GPU's clock, done or still queued."""

    def __init__(self, t: float, done: bool = True) -> None:
        self.t, self.done = t, done

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True

    def elapsed_time(self, end: "_Event") -> float:
        return (end.t - self.t) * 1e3  # milliseconds, as CUDA events report


def test_gpu_phases_come_from_the_events_once_they_complete():
    section = {"steps": []}
    timer = timing.Timer(section)
    fwd, bwd = timing.PHASE_INDEX["forward"], timing.PHASE_INDEX["backward"]
    timer.close_step(1, 10.0, checked=False)
    timer.resume(10.0)
    timer.add("data", 0.002)
    # two micro-batches: the forward events add up; the backward's end is still queued
    late = _Event(10.090, done=False)
    events = [(fwd, _Event(10.0), _Event(10.010)), (fwd, _Event(10.020), _Event(10.035)),
              (bwd, _Event(10.040), late)]
    timer.close_step(2, 10.1, checked=False, events=events)
    timer.resolve()
    assert section["steps"] == [] and len(timer.pending) == 1
    late.done = True
    timer.resolve()
    (row,) = section["steps"]
    named = dict(zip(timing.COLUMNS, row))
    assert (named["step"], named["total"], named["data"]) == (2, 100_000, 2000)
    assert named["forward"] == pytest.approx(25_000, abs=1) and named["backward"] == pytest.approx(50_000, abs=1)


def _with_ddp_timers(rec: dict, gradient_bytes: int) -> dict:
    rec["probes"]["timing"]["ddp"] = {  # DDP's own timers, nanoseconds: 14 ms of reduction, 2 hidden
        "avg_backward_comm_time": 14_000_000, "avg_backward_compute_comm_overlap_time": 2_000_000,
        "avg_forward_compute_time": 1_000_000, "avg_backward_compute_time": 3_000_000,
        "bucket_cap_bytes": 25 * 2**20, "total_parameter_size_bytes": gradient_bytes}
    return rec


def test_an_exposed_reduction_is_reported_only_for_models_big_enough_to_be_bandwidth_bound():
    big = performance.summarise([_with_ddp_timers(_rank(r, fwd=1000, bwd=14_000), 40 * 2**20) for r in range(2)])
    (hint,) = big["hints"]
    assert hint["kind"] == "communication" and "bucket_cap_mb (now 25 MB)" in hint["text"]
    tiny = performance.summarise([_with_ddp_timers(_rank(r, fwd=1000, bwd=14_000), 644) for r in range(2)])
    assert tiny["hints"] == [] and tiny["ddp"]["exposed_comm_s"] == pytest.approx(0.012)


def test_a_rank_slowed_in_some_steps_by_a_busy_machine_is_no_straggler():
    # rank 0 is 30 ms slower (descheduled) in 3 steps of 5, rank 1 in the others: rank 0's median
    # is the slow one, but it is not slow step after step
    def rows(rank: int) -> dict:
        rec = _rank(rank)
        for row in rec["probes"]["timing"]["steps"]:
            slow = (row[0] % 5 < 3) == (rank == 0)
            row[3] += 30_000 if slow else 0  # forward
            row[4] += 0 if slow else 30_000  # backward: waiting
            row[1] += 30_000
        return rec

    perf = performance.summarise([rows(0), rows(1)])
    assert perf["ranks"][0]["phases"]["forward"]["median"] == pytest.approx(0.035)
    assert perf["straggler"] is None
