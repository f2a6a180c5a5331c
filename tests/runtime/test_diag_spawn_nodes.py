"""Scripts that spawn their own workers, and one job over two torchrun agents (two "nodes")."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid

import pytest
from diag_jobs import ROOT, assert_no_survivors, codes, ddpcheck_run, env, finding, fixture

pytestmark = pytest.mark.slow


def test_spawn_style_script_runs_plainly_and_its_workers_are_checked(tmp_path):
    script = fixture("spawn_tutorial.py", tmp_path)
    port = str(_free_port())
    # --nproc is the number of emulated GPUs the script's device_count() sees (no CUDA here).
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--fault", "crash", "--port", port],
                                    tmp_path, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "starts its own workers (mp.spawn): running it with the plain interpreter" in proc.stderr
    spawn = finding(data, "DDP125")
    assert spawn["location"]["line"] == _line_of(script, "mp.spawn(")
    # The planted fault in worker 1 is found in the worker, with its line.
    crash = finding(data, "DDP120")
    assert crash["ranks"] == [1] and crash["location"]["line"] == _line_of(script, "raise ValueError")
    # The workers ran with the same checks as torchrun ranks: both wrote their records.
    assert sorted(r["rank"] for r in data["run"]["ranks"]) == [0, 1]
    assert next(c for c in data["run"]["checks"] if c["code"] == "DDP108")["status"] == "pass"
    assert_no_survivors(mark)


def test_two_agents_form_one_job_and_the_rank_0_node_has_the_verdicts(tmp_path):
    script = fixture("train.py", tmp_path)
    endpoint = f"localhost:{_free_port()}"
    rdzv_id = uuid.uuid4().hex[:8]
    marks, procs, reports = [], [], []
    for node in range(2):
        mark = uuid.uuid4().hex
        report = tmp_path / f"node{node}.json"
        args = ["--nnodes", "2", "--nproc", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                "--rdzv-id", rdzv_id, "--report", str(report), str(script)]
        procs.append(subprocess.Popen([sys.executable, "-m", "ddpcheck", "run", *args], cwd=ROOT,
                                      env=env(mark), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        marks.append(mark)
        reports.append(report)
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    data = [json.loads(r.read_text()) for r in reports]
    assert all(d["run"]["job"]["world_size"] == 4 for d in data)
    head_at = next(i for i, d in enumerate(data) if 0 in d["run"]["job"]["ranks_reported"])
    head, other = data[head_at], data[1 - head_at]
    # One job of 4 ranks, 2 on each agent; the node holding rank 0 has every rank's record and
    # judges across all four: the shards of all ranks together cover the dataset exactly.
    assert head["run"]["job"]["ranks_reported"] == [0, 1, 2, 3]
    assert other["run"]["job"]["ranks_reported"] == [2, 3]
    shards = next(c for c in head["run"]["checks"] if c["code"] == "DDP101")
    assert shards["status"] == "pass" and "coverage 64/64" in shards["detail"]
    assert next(c for c in head["run"]["checks"] if c["code"] == "DDP105")["status"] == "pass"
    assert "this node ran ranks 2–3 of 4" in outs[1 - head_at][0]
    for mark in marks:
        assert_no_survivors(mark)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _line_of(path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if text in t)


def test_a_hidden_spawn_under_the_launcher_is_stopped_by_the_guard(tmp_path):
    script = fixture("hidden_spawn.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "1", str(script)], tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    guard = finding(data, "DDP126")
    assert guard["location"]["line"] == _line_of(script, "starter(worker")
    assert "--spawn" in guard["message"]
    assert "worker 0" not in proc.stdout  # no worker was started
    assert_no_survivors(mark)


def test_a_script_that_runs_either_way_is_a_torchrun_job_until_a_rank_takes_its_spawn_branch(tmp_path):
    # `if args.spawn: mp.spawn(...) else: <read LOCAL_RANK>`: run plainly it died with KeyError.
    script = fixture("dual_mode.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "trained as a torchrun rank" in proc.stdout
    assert "running it with torchrun" in proc.stderr and "KeyError" not in proc.stderr
    assert codes(data) == ["DDP122"]  # the CUDA emulation note, nothing else
    assert data["run"]["job"]["world_size"] == 2
    assert all(c["status"] != "fail" for c in data["run"]["checks"])
    assert {"DDP105", "DDP106", "DDP103"} <= {c["code"] for c in data["run"]["checks"] if c["status"] == "pass"}
    assert_no_survivors(mark)

    # The same script told to spawn: every torchrun rank calls mp.spawn before init_process_group,
    # leaves quietly, and ddpcheck runs the script again with the plain interpreter.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--spawn"], tmp_path, TMPDIR=str(private_tmp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Neither attempt's ranks wrote a Flight Recorder dump, so neither leaves its folder behind.
    assert not list(private_tmp.glob("ddpcheck-flight-recorder-*"))
    assert "trained spawned workers" in proc.stdout
    assert "running it again with the plain interpreter" in proc.stderr
    assert "Traceback" not in proc.stderr and "SpawnUnderLauncherError" not in proc.stderr
    spawn = finding(data, "DDP125")
    assert spawn["location"]["line"] == _line_of(script, "mp.spawn(")
    assert "first ran it with torchrun" in spawn["message"]
    assert sorted(codes(data)) == ["DDP122", "DDP125"]
    assert data["run"]["job"]["world_size"] == 2 and sorted(data["run"]["job"]["ranks_reported"]) == [0, 1]
    assert all(c["status"] != "fail" for c in data["run"]["checks"])
    assert_no_survivors(mark)
