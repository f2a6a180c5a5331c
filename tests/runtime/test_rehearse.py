"""`ddpcheck run --rehearse`: the job at world sizes this machine cannot hold, rehearsed one
representative rank at a time. The scripts are written like public torchrun scripts; each bug
appears only at scale, and the correct variant stays clean at every size."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.helpers import FIXTURES, ROOT, assert_no_survivors, cli_env, run_job

SCRIPTS = FIXTURES / "run" / "rehearse"
SCHEMA = json.loads((ROOT / "ddpcheck" / "report" / "report.schema.json").read_text())


def rehearse(tmp_path: Path, sizes: str, *script_args: str, extra: tuple[str, ...] = ()):
    job = run_job(["--rehearse", sizes, "--quiet", *extra, str(SCRIPTS / "scale_bugs.py"), *script_args],
                  tmp_path, timeout=400)
    assert job.report is not None, job.stderr[-3000:]
    jsonschema.validate(job.report, SCHEMA)
    assert_no_survivors(job.mark)
    return job


def table(job) -> dict[str, dict[str, str]]:
    return {row["code"]: row["cells"] for row in job.report["run"]["rehearse"]["table"]}


@pytest.mark.slow
def test_a_validation_set_smaller_than_the_world_is_found_at_512_with_the_empty_ranks(tmp_path):
    job = rehearse(tmp_path, "64,512", "--bug", "val")
    assert job.returncode == 1, job.stdout[-3000:]
    assert job.codes == {"DDP163"}  # the ZeroDivisionError on the empty ranks is its consequence
    (finding,) = job.report["findings"]
    assert finding["message"].startswith("ok at 64; at 512 ranks: ranks 500–511 get no evaluation batch")
    assert "the evaluation set has 500 samples" in finding["message"]
    assert "ZeroDivisionError" in finding["message"]
    assert finding["location"]["line"] == 60  # the loader made from the hand-made split
    assert table(job) == {"DDP163": {"64": "ok", "512": "empty on ranks 500–511"}}
    assert "DDP163 ok" in job.stdout and "empty on ranks 500–511" in job.stdout


@pytest.mark.slow
def test_a_training_set_split_by_hand_gives_some_ranks_a_batch_fewer_first_at_64(tmp_path):
    job = rehearse(tmp_path, "8,64", "--bug", "train")
    assert job.codes == {"DDP160"}
    (finding,) = job.report["findings"]
    assert finding["location"]["line"] == 56
    assert finding["message"].startswith("ok at 8; at 64 ranks: ranks 16–63 draw 7 training batches per epoch, "
                                         "the others 8")
    assert "the training set has 2000 samples, split by rank as range(rank, 2000, 64)" in finding["message"]
    assert table(job)["DDP160"] == {"8": "ok", "64": "ranks 16–63: 7 of 8 batches"}


@pytest.mark.slow
def test_an_accumulation_count_that_becomes_zero_fails_at_64_with_its_line(tmp_path):
    job = rehearse(tmp_path, "8,64", "--bug", "accum")
    assert job.codes == {"DDP162"}
    (finding,) = job.report["findings"]
    assert finding["location"]["line"] == 66
    assert "ok at 8; at 64 ranks" in finding["message"]
    assert "AssertionError: total batch 128 too small for 64 ranks" in finding["message"]
    assert finding["details"]["first_world_size"] == 64


@pytest.mark.slow
def test_a_device_from_the_global_rank_is_refused_on_the_second_node(tmp_path):
    job = rehearse(tmp_path, "8,64", "--bug", "device")
    assert job.codes == {"DDP150"}
    (finding,) = job.report["findings"]
    assert finding["location"]["line"] == 49
    assert "ok at 8; at 64 ranks" in finding["message"]
    assert "56 (node 7, local rank 0)" in finding["message"]
    assert "invalid device ordinal" in finding["message"]
    # Rank 1 of node 0 is fine at every size: only the ranks of later nodes are named.
    assert 1 not in finding["ranks"] and 63 in finding["ranks"]


@pytest.fixture(scope="module")
def lr_and_stats(tmp_path_factory):
    """One rehearsal of two faults that touch unrelated checks (the learning rate, collectives
    made by some ranks only): the job reports exactly their two findings, each test reads its own."""
    tmp_path = tmp_path_factory.mktemp("lr-and-stats")
    job = rehearse(tmp_path, "8,64", "--bug", "lr,stats", extra=("--html", str(tmp_path / "r.html")))
    assert job.codes == {"DDP161", "DDP164"}, job.stdout[-3000:]
    return job, tmp_path / "r.html"


def _finding(job, code: str) -> dict:
    return next(f for f in job.report["findings"] if f["code"] == code)


@pytest.mark.slow
def test_a_learning_rate_scaled_without_a_cap_is_reported_with_its_factor(lr_and_stats):
    job, html = lr_and_stats
    finding = _finding(job, "DDP164")
    assert "64× its value at 1 rank (0.01)" in finding["message"] and "0.64" in finding["message"]
    assert finding["location"]["line"] == 78  # where the optimizer is made
    sizes = {s["world_size"]: s for s in job.report["run"]["rehearse"]["sizes"]}
    assert sizes[8]["lr"] == pytest.approx(0.08) and sizes[64]["lr"] == pytest.approx(0.64)
    assert sizes[8]["global_batch"] == 128  # 4 per micro-batch × 4 accumulated × 8 ranks
    page = html.read_text()
    assert 'id="rehearse-table"' in page and "learning-rate-at-scale" in page and "lr 64×" in page


@pytest.mark.slow
def test_collectives_made_by_some_ranks_only_are_named_with_the_line(lr_and_stats):
    job, _ = lr_and_stats
    finding = _finding(job, "DDP161")
    assert "ok at 8; at 64 ranks" in finding["message"]
    assert "all_reduce float32[1]" in finding["message"]
    assert set(finding["ranks"]) == {0, 1, 32, 56, 63}
    assert table(job)["DDP161"]["64"] == "ranks 0, 1 vs ranks 32, 56, 63"


@pytest.mark.slow
def test_a_rank_that_waits_for_another_is_blocked_not_a_hang_of_ddpcheck(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    job = rehearse(tmp_path, "8,64", "--bug", "wait", "--token-dir", str(tokens), extra=("--hang-timeout", "3"))
    assert job.codes == {"DDP166"}
    (finding,) = job.report["findings"]
    assert "ok at 8; at 64 ranks" in finding["message"] and "scale_bugs.py:73" in finding["message"]
    statuses = job.report["run"]["rehearse"]["sizes"][1]["statuses"]
    assert statuses["0"] == "stopped" and statuses["32"] == "blocked"


@pytest.mark.slow
def test_the_correct_script_stays_clean_at_8_64_and_512(tmp_path):
    job = run_job(["--rehearse", "8,64,512", "--quiet", str(SCRIPTS / "scale_ok.py")], tmp_path, timeout=400)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert job.report["findings"] == []
    jsonschema.validate(job.report, SCHEMA)
    sizes = {s["world_size"]: s for s in job.report["run"]["rehearse"]["sizes"]}
    assert sorted(sizes) == [8, 64, 512]
    assert sizes[512]["ranks_run"] == [0, 1, 256, 504, 511]
    for size in sizes.values():
        for rank in size["ranks"]:
            assert rank["status"] == "stopped", rank
            assert rank["rehearsal"]["comm_hook"] == "local bucket"
            assert rank["node"] == rank["rank"] // 8 and rank["rehearsal"]["device"] == rank["rank"] % 8
            assert rank["collectives"]["count"] > 0
    assert "no problem found at any rehearsed world size" in job.stdout
    assert_no_survivors(job.mark)


def test_representative_ranks_and_the_sampler_shards_of_every_rank_match_torch():
    from torch.utils.data.distributed import DistributedSampler

    from ddpcheck.run.rehearse.plan import SamplerShards, representatives

    assert representatives(8, 8) == (0, 1, 4, 7)
    assert representatives(64, 8) == (0, 1, 32, 56, 63)
    assert representatives(20, 8) == (0, 1, 10, 16, 19)
    for n, world, drop in ((500, 512, False), (500, 512, True), (1001, 4, False), (1001, 4, True), (7, 7, True)):
        shards = SamplerShards(n, world, drop)
        for rank in (0, world - 1):
            drawn = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, drop_last=drop))
            assert len(drawn) == shards.per_rank
        assert shards.padding == (0 if drop else math.ceil(n / world) * world - n)


@pytest.mark.parametrize(("args", "said"), [
    (["--rehearse", "8,x"], "not a whole number"),
    (["--rehearse", "0"], "from 1 to"),
    (["--rehearse", "8", "--scaling", "1,2"], "drop --scaling"),
])
def test_rehearse_usage_errors_are_one_line(capsys, args, said):
    # In-process (`ddpcheck run` calls this very function): torch's parser is imported once, not
    # in a fresh interpreter per case.
    from ddpcheck.run.launcher.entry import main

    assert main([*args, str(SCRIPTS / "scale_ok.py")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_the_cli_does_not_import_torch_for_rehearse_help():
    code = ("import sys; import ddpcheck.cli, ddpcheck.run.rehearse.plan, ddpcheck.run.rehearse.judge, "
            "ddpcheck.run.rehearse.report; assert 'torch' not in sys.modules")
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True, env=cli_env(), cwd=ROOT)


def test_ranks_run_beside_each_other_are_reported_in_plan_order_with_the_baseline_alone_first():
    import threading
    import time

    from ddpcheck.run.rehearse.rehearsal import in_order

    lock = threading.Lock()
    running, most, log = set(), [0], []

    def rehearse(place):
        with lock:
            assert place == 0 or 0 not in running
            running.add(place)
            most[0] = max(most[0], len(running))
            log.append(f"start {place}")
        time.sleep(0.02 * (9 - place))  # the later a place, the sooner it ends
        with lock:
            running.discard(place)
        return place * 10

    results = in_order(list(range(9)), rehearse, lambda done, p: log.append(f"line {done} {p}"),
                       lambda r: log.append(f"result {r}"), lambda baseline: 3, lambda: None)
    assert results == [p * 10 for p in range(9)]
    assert most[0] == 3  # bounded, and the bound is reached
    assert log[:3] == ["line 1 0", "start 0", "result 0"]  # the baseline ran alone, first
    lines = [entry for entry in log if not entry.startswith("start")]
    assert lines == [x for p in range(9) for x in (f"line {p + 1} {p}", f"result {p * 10}")]
    starts = [int(entry.split()[1]) for entry in log if entry.startswith("start")]
    assert starts == sorted(starts)  # started in plan order


def test_a_failing_rank_stops_the_others_and_starts_no_more():
    import time

    from ddpcheck.run.rehearse.rehearsal import in_order

    ran, stopped = [], []

    def rehearse(place):
        ran.append(place)
        if place == 1:
            raise OSError("no such interpreter")
        time.sleep(0.5 if place else 0)
        return place

    with pytest.raises(OSError):
        in_order(list(range(6)), rehearse, lambda done, p: None, lambda r: None, lambda baseline: 1,
                 lambda: stopped.append(True))
    assert stopped == [True] and 1 in ran and len(ran) < 6


@pytest.mark.parametrize(("cpus", "available_mb", "rank_mb", "slots"), [
    (16, 64_000, 400, 16),   # one per CPU
    (16, 2_000, 400, 3),     # as many as memory holds (a rank counts at least 512 MB)
    (16, 8_000, 2_000, 4),   # the baseline's own peak when larger
    (2, None, 400, 2),       # no memory figure: the CPUs
    (4, 100, 400, 1),        # always one
])
def test_rehearsed_ranks_at_once_are_bounded_by_cpus_and_memory(cpus, available_mb, rank_mb, slots):
    from ddpcheck.run.rehearse.rehearsal import parallel_ranks

    assert parallel_ranks(cpus, available_mb, rank_mb) == slots


def test_a_rank_past_its_time_limit_beside_others_is_rehearsed_again_alone_and_that_result_counts():
    import threading
    import time

    from ddpcheck.run.rehearse.rehearsal import in_order

    lock = threading.Lock()
    running, calls, beside = set(), [], {}

    def rehearse(place):
        with lock:
            calls.append(place)
            beside[len(calls)] = set(running)
            running.add(place)
        time.sleep(0.05)
        with lock:
            running.discard(place)
        return (place, "blocked" if place == 3 and calls.count(3) == 1 else "stopped")

    def run(slots):
        calls.clear()
        beside.clear()
        return in_order(list(range(6)), rehearse, lambda done, p: None, lambda r: None, lambda baseline: slots,
                        lambda: None, alone=lambda result: result[1] == "blocked")

    assert run(3) == [(p, "stopped") for p in range(6)]
    assert calls.count(3) == 2
    again = [n for n, place in enumerate(calls, start=1) if place == 3][1]
    assert beside[again] == set()  # nothing ran beside the second try
    # One at a time, nothing slowed it down: its first result stands.
    assert run(1)[3] == (3, "blocked") and calls.count(3) == 1
