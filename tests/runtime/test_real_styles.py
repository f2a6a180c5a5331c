"""GPU scripts written the way public DDP code is written, run on a CPU machine through the real
entry point: each runs to its end with every check passing, and a script that stops early gets
"not reached", never "failed", with the reason and the line."""

from __future__ import annotations

import json
import re

import pytest

from diag_jobs import assert_no_survivors, codes, ddpcheck_run, finding, fixture

pytestmark = pytest.mark.slow

# What a complete, correct DDP run must pass (on every job below that trains).
TRAINED = ("DDP105", "DDP106", "DDP108", "DDP109", "DDP110", "DDP111")


def status(data: dict, code: str) -> str:
    return next(c["status"] for c in data["run"]["checks"] if c["code"] == code)


def detail(data: dict, code: str) -> str:
    return next(c["detail"] for c in data["run"]["checks"] if c["code"] == code)


def line_of(path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if text in t)


def test_trainer_class_with_integer_devices_then_spawn_by_device_count_resumes_it(tmp_path):
    trainer = fixture("gpu_trainer.py", tmp_path)
    spawner = fixture("gpu_trainer_spawn.py", tmp_path)
    snapshot, seen = tmp_path / "snapshot.pt", tmp_path / "seen.json"

    proc, data, mark = ddpcheck_run(["--nproc", "2", str(trainer), "--snapshot", str(snapshot)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == ["DDP122"], codes(data)  # only the note that CUDA was emulated
    for code in TRAINED:
        assert status(data, code) == "pass", (code, detail(data, code))
    assert "cuda:0" in detail(data, "DDP110") and "cuda:1" in detail(data, "DDP110")
    emulated = finding(data, "DDP122")["message"]
    assert "pin_memory" in emulated and "DDP device_ids" in emulated
    assert snapshot.exists()
    assert_no_survivors(mark)

    # The same Trainer started by mp.spawn(nprocs=torch.cuda.device_count()), resuming from the
    # snapshot with map_location=f"cuda:{gpu_id}": as many workers as --nproc emulated GPUs.
    proc, data, mark = ddpcheck_run(["--nproc", "3", str(spawner), "--snapshot", str(snapshot),
                                     "--epochs", "3", "--report", str(seen)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(codes(data)) == ["DDP122", "DDP125"], codes(data)
    assert json.loads(seen.read_text()) == {"world_size": 3, "device_count": 3, "current_device": 0,
                                            "model_device": "cpu"}
    assert data["run"]["job"]["world_size"] == 3
    assert "epoch 2" in proc.stdout and "epoch 1" not in proc.stdout  # resumed after epoch 2 of 3
    assert "torch.load(map_location=cuda)" in finding(data, "DDP122")["message"]
    for code in ("DDP105", "DDP108", "DDP109"):
        assert status(data, code) == "pass", (code, detail(data, code))
    assert_no_survivors(mark)


def test_accelerator_api_script_runs_and_its_polite_exit_is_said_plainly(tmp_path):
    script = fixture("accelerator_api.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == ["DDP122"], codes(data)
    for code in TRAINED:
        assert status(data, code) == "pass", (code, detail(data, code))
    assert "rank 1 on cuda:1 (current index 1, backend nccl)" in proc.stdout
    assert "torch.accelerator" in finding(data, "DDP122")["message"]
    assert_no_survivors(mark)

    # Not enough devices: the script says so and exits 0 before init_process_group.
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--min-devices", "8"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == ["DDP130", "DDP122"], codes(data)  # the early end leads; torch.accelerator was asked
    exit_line = line_of(script, "sys.exit(0)")
    early = finding(data, "DDP130")
    assert f"exited with 0 at accelerator_api.py:{exit_line} before init_process_group" in early["message"]
    assert "Unable to find 8 accelerators to run this example. Exiting." in early["message"]
    for code in ("DDP105", "DDP106", "DDP108", "DDP109", "DDP111"):
        assert status(data, code) == "not-reached", (code, status(data, code))
    assert "before init_process_group" in detail(data, "DDP108")
    assert not any(c["status"] == "fail" for c in data["run"]["checks"])
    assert "FAIL" not in proc.stdout and "trained alone" not in proc.stdout
    assert_no_survivors(mark)


def test_nanogpt_style_amp_with_bf16_detection_and_fp16_grad_scaler(tmp_path):
    script = fixture("gpt_amp.py", tmp_path)
    for dtype in ("auto", "float16"):  # auto: is_bf16_supported() picks bfloat16; float16: GradScaler on
        proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--dtype", dtype, "--iters", "3"], tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert codes(data) == ["DDP122"], codes(data)
        for code in TRAINED:
            assert status(data, code) == "pass", (code, detail(data, code))
        assert f"dtype {'bfloat16' if dtype == 'auto' else 'float16'}" in proc.stdout
        assert "ddpcheck emulated GPU (CPU): 16.0 GiB, sm_80, 108 SMs" in proc.stdout
        assert re.search(r"iter 2: loss [\d.]+, [\d.]+ ms", proc.stdout), proc.stdout  # CUDA events time
        emulated = finding(data, "DDP122")["message"]
        assert "autocast" in emulated and "GradScaler" in emulated
        assert data["run"]["job"]["steps"] == 3
        assert_no_survivors(mark)


@pytest.mark.parametrize("how, line_text, before", [
    ("crash-before-init", 'raise FileNotFoundError("config.yaml', "before init_process_group"),
    ("crash-before-wrap", 'raise KeyError("model.width")', "before the model was wrapped in DDP"),
])
def test_a_rank_that_crashes_early_leaves_the_checks_not_reached(tmp_path, how, line_text, before):
    script = fixture("dies_early.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), how], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    line = line_of(script, line_text)
    assert crash["ranks"] == [1] and crash["location"]["line"] == line
    assert crash["message"].startswith("rank 1 raised")
    assert "DDP109" not in codes(data) and "DDP108" not in codes(data)
    for code in ("DDP105", "DDP106", "DDP109"):
        assert status(data, code) == "not-reached", (code, status(data, code))
        assert "rank 1 crashed (" in detail(data, code) and f"dies_early.py:{line}) {before}" in detail(data, code)
    assert not any(c["status"] == "fail" for c in data["run"]["checks"])
    # The root cause leads: the crash is the first finding; rank 0 was only stopped.
    assert data["findings"][0]["code"] == "DDP120"
    assert "Sending process" not in proc.stderr and "closing signal" not in proc.stderr  # torchrun's log is quiet
    assert_no_survivors(mark)
