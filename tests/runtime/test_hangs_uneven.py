"""Planted deadlocks and uneven work, each a real 4-rank gloo job through `python -m ddpcheck run`:
each gets exactly its finding, named with both sides' ranks and lines, within one hang timeout of
the job's last progress, and leaves no process behind; a correct script gets none. And when
`ddpcheck run` itself is killed with SIGKILL, its ranks go with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from diag_jobs import ROOT, assert_no_survivors, codes, ddpcheck_run, env, fixture, survivors

pytestmark = pytest.mark.slow

TIMEOUT = 5  # --hang-timeout in these jobs


def _line_of(path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if text in t)


def _run(name: str, tmp_path, *extra: str):
    script = fixture(name, tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "4", "--hang-timeout", str(TIMEOUT), *extra, str(script)],
                                    tmp_path, timeout=300)
    assert data is not None, proc.stdout + proc.stderr
    return script, proc, data, mark


def _only(data: dict, code: str) -> dict:
    assert codes(data) == [code], [(f["code"], f["message"]) for f in data["findings"]]
    return data["findings"][0]


def _decided_within_one_timeout(found: dict) -> None:
    # quiet_s: from the job's last progress on any rank to the verdict (polls and load included).
    assert found["details"]["quiet_s"] < 2 * TIMEOUT, found["details"]["quiet_s"]


def test_a_barrier_only_rank_0_enters_mid_loop_is_named_against_ddps_all_reduce(tmp_path):
    script, proc, data, mark = _run("midloop_barrier.py", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = _only(data, "DDP128")
    barrier, backward = _line_of(script, "dist.barrier()"), _line_of(script, "loss.backward()")
    assert re.fullmatch(
        rf"call #\d+: rank 0 barrier at midloop_barrier.py:{barrier} \(after step 3\), ranks 1–3 DDP's gradient "
        rf"all-reduce \(1 bucket: 644 B\) in loss.backward\(\) at midloop_barrier.py:{backward} \(step 4\); "
        rf"the job hung \(no progress for {TIMEOUT} s\) and ddpcheck stopped it", found["message"]), found["message"]
    assert found["ranks"] == [0] and found["path"] == str(script) and found["location"]["line"] == barrier
    _decided_within_one_timeout(found)
    states = found["details"]["states"]
    assert sorted(states) == ["0", "1", "2", "3"]
    # Every rank's innermost frames in the user's code, read while it was blocked inside gloo.
    assert states["0"]["frames"][0] == f"{script}:{barrier} in main"
    assert all(states[r]["frames"][0] == f"{script}:{backward} in main" for r in "123")
    assert all(states[r]["place"] == "the backward" for r in "123")
    assert not any(s["busy"] for s in states.values())
    # The check's finding under the table says where, as the incidents do.
    assert re.search(rf"DDP128 collective-mismatch \S*midloop_barrier\.py:{barrier}: call #", proc.stdout), proc.stdout
    assert_no_survivors(mark)


def test_an_all_reduce_longer_on_one_rank_is_named_with_both_shapes(tmp_path):
    script, proc, data, mark = _run("rank_sized_all_reduce.py", tmp_path)
    found = _only(data, "DDP128")
    line = _line_of(script, "dist.all_reduce(values)")
    assert re.match(rf"call #\d+: rank 2 all_reduce float32\[5\] at rank_sized_all_reduce.py:{line} \(after step 2\), "
                    rf"ranks 0, 1, 3 all_reduce float32\[4\] at rank_sized_all_reduce.py:{line} \(after step 2\)",
                    found["message"]), found["message"]
    assert found["ranks"] == [2]
    _decided_within_one_timeout(found)
    assert_no_survivors(mark)


def test_two_collectives_in_swapped_order_on_one_rank_are_named_with_both_lines(tmp_path):
    script, proc, data, mark = _run("swapped_collectives.py", tmp_path)
    found = _only(data, "DDP128")
    first, other = _line_of(script, "# rank 1 broadcasts first"), _line_of(script, "# the other ranks all-reduce first")
    assert re.match(rf"call #\d+: rank 1 broadcast float32\[4\] from rank 0 at swapped_collectives.py:{first} "
                    rf"\(after step 2\), ranks 0, 2, 3 all_reduce float32\[4\] at swapped_collectives.py:{other} ",
                    found["message"]), found["message"]
    assert found["ranks"] == [1] and found["location"]["line"] == first
    _decided_within_one_timeout(found)
    assert_no_survivors(mark)


def test_a_reduce_op_that_differs_on_one_rank_is_found_at_the_first_checked_step(tmp_path):
    # gloo completes this call on every rank: nothing hangs, the metric is just wrong.
    script = fixture("reduce_op_mismatch.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "3", str(script)], tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = _only(data, "DDP128")
    line = _line_of(script, "dist.all_reduce(metric, op=op)")
    assert found["message"] == (
        f"call #3: rank 2 all_reduce float32[1] max at reduce_op_mismatch.py:{line} (before the first optimizer "
        f"step), ranks 0 and 1 all_reduce float32[1] at reduce_op_mismatch.py:{line} (before the first optimizer step)")
    assert found["ranks"] == [2] and found["location"]["line"] == line
    row = next(c for c in data["run"]["checks"] if c["code"] == "DDP128")
    assert row["step"] == 1  # seen at the first checked step's exchange, while the job ran on
    assert data["run"]["job"]["steps"] == 4
    assert_no_survivors(mark)


def test_a_shard_one_batch_longer_on_the_last_rank_is_the_root_cause(tmp_path):
    # gloo either aborts ("Received data size doesn't match") or hangs here: the finding is the same.
    script, proc, data, mark = _run("uneven_iterable.py", tmp_path)
    assert proc.returncode != 0
    found = _only(data, "DDP129")  # the crash or hang it caused folds into it
    loader = _line_of(script, "for batch, (x, y) in enumerate(loader)")
    # "drew" once every rank of the group was seen to run out of its loader, "had drawn" while one
    # of them had not yet said so when the job stopped: which one it is depends on timing.
    assert re.match(
        rf"uneven work in epoch 0 from the DataLoader at uneven_iterable\.py:{loader}: rank 3 had drawn 5 batches "
        r"\(4 optimizer steps\), ranks 0–2 (drew|had drawn) 4 batches \(4 optimizer steps\); so call #",
        found["message"]), found["message"]
    assert f"rank 3 DDP's gradient all-reduce (1 bucket: 36 B) in loss.backward() at uneven_iterable.py:" \
           f"{_line_of(script, 'loss.backward()')} (step 5)" in found["message"]
    assert f"ranks 0–2 all_reduce float32[1] at uneven_iterable.py:{_line_of(script, 'dist.all_reduce(total)')}" \
        in found["message"]
    assert found["ranks"] == [3]
    assert_no_survivors(mark)


def test_early_stopping_on_one_ranks_own_loss_is_named_as_leaving_the_loop(tmp_path):
    script, proc, data, mark = _run("early_stop_local.py", tmp_path)
    found = _only(data, "DDP129")
    loop, stop = _line_of(script, "for step in range(1, 20)"), _line_of(script, "break  #")
    after = _line_of(script, "dist.barrier()")
    assert re.match(rf"rank 1 left the training loop at early_stop_local.py:{loop} after (\d+) optimizer steps "
                    rf"\(the `break` at early_stop_local.py:{stop}\) while ranks 0, 2, 3 went on: call #\d+: rank 1 "
                    rf"barrier at early_stop_local.py:{after} \(after step \1\), ranks 0, 2, 3 DDP's gradient all-reduce",
                    found["message"]), found["message"]
    assert found["ranks"] == [1] and found["location"]["line"] == stop
    _decided_within_one_timeout(found)
    assert_no_survivors(mark)


def test_a_correct_script_with_its_own_collectives_gets_no_finding(tmp_path):
    script, proc, data, mark = _run("collectives_ok.py", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == []
    rows = {c["code"]: c for c in data["run"]["checks"]}
    assert rows["DDP128"]["status"] == "pass" and "the same on every rank, compared at 12 checked steps" in \
        rows["DDP128"]["detail"], rows["DDP128"]
    assert rows["DDP129"]["status"] == "pass" and rows["DDP129"]["detail"].startswith("2 data loader passes and 12 optimizer steps")
    assert_no_survivors(mark)


def test_a_rank_stuck_in_native_code_holding_the_gil_is_named_and_killed(tmp_path):
    # Its watchdog cannot run: the other rank decides without it and SIGKILLs it.
    script = fixture("stuck_holding_gil.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--hang-timeout", str(TIMEOUT), str(script)], tmp_path,
                                    timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = _only(data, "DDP123")
    assert found["ranks"] == [1]
    assert "rank 1 is silent" in found["message"] and "rank 1 never answered" in found["message"]
    assert f"rank 0 is in all_reduce float32[2] at stuck_holding_gil.py:{_line_of(script, 'dist.all_reduce(t)')}" \
        in found["message"]
    # ddpcheck killed it (torchrun's SIGTERM cannot: the script's handler never gets the GIL, and
    # torchrun would wait 30 s before its own SIGKILL).
    assert found["details"]["killed"] == [1]
    assert_no_survivors(mark)


def test_the_ranks_die_with_ddpcheck_when_it_is_killed(tmp_path):
    # A CI runner's timeout sends SIGKILL: torchrun gets no chance to stop the ranks.
    script = fixture("midloop_barrier.py", tmp_path)
    mark = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "ddpcheck", "run", "--nproc", "4", "--hang-timeout", "300",
                             str(script)], cwd=ROOT, env=env(mark), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadlocked = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "planted fault" in line:
                deadlocked.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert deadlocked.wait(240), "the job never reached its planted fault"
        assert len(survivors(mark)) >= 5  # ddpcheck and its four ranks
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 5
        while survivors(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not survivors(mark), "ranks outlived the killed launcher"
    finally:
        if proc.poll() is None:
            proc.kill()
        assert_no_survivors(mark)


def test_a_rank_waiting_for_its_busy_worker_processes_is_slow_not_hung(tmp_path):
    # torch.compile's code generation runs in a compile-worker process and its own workers: the
    # rank's training thread sleeps, its grandchildren compute, for longer than the hang timeout.
    # Twice the timeout: a job taken for hung would be stopped half-way through the work (a third
    # timeout only burned a core for longer).
    script = fixture("slow_worker_pool.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--hang-timeout", str(TIMEOUT), str(script)], tmp_path,
                                    timeout=300, BUSY_SECONDS=str(2 * TIMEOUT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == [], [(f["code"], f["message"]) for f in data["findings"]]
    assert_no_survivors(mark)


@pytest.mark.parametrize("mode", ["after", "epochs", "idle"])
def test_a_collective_only_rank_0_makes_is_a_mismatch_at_its_line(tmp_path, mode):
    # after: the other rank finishes the script and rank 0's call breaks; epochs: rank 0's call
    # meets the other rank's next gradient all-reduce (it did not leave the loop); idle: the other
    # rank waits outside any collective and the job hangs.
    script = fixture("rank0_only_collective.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--hang-timeout", str(TIMEOUT), str(script), mode],
                                    tmp_path, timeout=300)
    assert data is not None, proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = _only(data, "DDP128")
    lines = [i for i, t in enumerate(script.read_text().splitlines(), 1) if "dist.all_reduce(seen)" in t]
    line = lines[0] if mode == "epochs" else lines[1]
    assert found["ranks"] == [0] and found["location"]["line"] == line, found
    assert f"rank 0 all_reduce float32[1] at rank0_only_collective.py:{line}" in found["message"]
    assert "rank 0 makes that call only under `if " in found["message"]
    if mode == "idle":
        assert found["message"].endswith(f"the job hung (no progress for {TIMEOUT} s) and ddpcheck stopped it")
        _decided_within_one_timeout(found)
    assert_no_survivors(mark)


def test_first_compile_inside_ddp_forward_is_slow_not_hung(tmp_path):
    # Rank 0 compiles its evaluation graph inside DDP's forward, waiting for torch.compile's
    # compile workers, while rank 1 waits in the gradient all-reduce: longer than the hang timeout
    # on a small machine, and no hang.
    script = fixture("compile_eval_first.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--hang-timeout", "3", str(script)], tmp_path, timeout=400,
                                    TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))  # a cold compile
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == [], [(f["code"], f["message"]) for f in data["findings"]]  # not called emulated either
    assert data["run"]["job"]["steps"] == 3
    assert_no_survivors(mark)
