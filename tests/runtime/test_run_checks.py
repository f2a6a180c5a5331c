"""`ddpcheck run` on real 2- and 4-rank gloo jobs: a correct script passes every check, each
planted fault gets exactly its own finding, and checking does not change the training."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rt_helpers import FIXTURES, ROOT, run_ddpcheck, subprocess_env

pytestmark = pytest.mark.slow
TRAIN = str(FIXTURES / "train.py")

# What a correct CPU script must pass (DDP107 buffers and DDP110 CUDA devices do not apply).
MUST_PASS = {"DDP100", "DDP101", "DDP102", "DDP103", "DDP104", "DDP105", "DDP106", "DDP108",
             "DDP109", "DDP111", "DDP112", "DDP113", "DDP114", "DDP116", "DDP128", "DDP129"}


def _weights(path):
    import torch

    return {k: v.numpy().tobytes() for k, v in torch.load(path).items()}


def test_correct_script_passes_every_check_and_trains_exactly_as_without_ddpcheck(tmp_path):
    checked = run_ddpcheck(["--nproc", "2", TRAIN, "--save", str(tmp_path / "checked.pt")], tmp_path)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert checked.codes == set()
    assert {c["code"] for c in checked.report["run"]["checks"] if c["status"] == "pass"} == MUST_PASS
    assert "optimizer step 1 checked" in checked.stderr  # progress during the run
    assert "DDP105" in checked.stdout and "pass" in checked.stdout  # the summary table
    job = checked.report["run"]["job"]
    assert (job["world_size"], job["steps"], job["checked_steps"]) == (2, 8, 8)

    # The same seeded script under plain torchrun: final weights bitwise equal.
    plain = tmp_path / "plain.pt"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", "2", TRAIN, "--save", str(plain)],
                   cwd=ROOT, env=subprocess_env(), capture_output=True, timeout=150)
    # (plain torchrun may still fail the job on the exit-time abort; the weights are saved before)
    assert _weights(plain) == _weights(tmp_path / "checked.pt")


# Faults that touch unrelated checks share a job (the suite stays lean); each job must report
# exactly the findings of its faults, so a fault that also tripped another check would show.
@pytest.mark.parametrize(("faults", "codes", "nproc"), [
    ("no-sampler,buffer-edit", {"DDP100", "DDP107"}, 2),
    ("no-set-epoch,tcp-init", {"DDP103", "DDP113"}, 2),
    ("unwrapped-model", {"DDP109"}, 2),
    ("grad-edit", {"DDP105"}, 2),
    ("no-sync", {"DDP105"}, 2),
    ("grad-none", {"DDP105"}, 2),
    ("param-edit", {"DDP106"}, 4),
    ("iterable,unused-param", {"DDP104", "DDP112"}, 2),
    ("seeded-inputs,bad-world-size", {"DDP104", "DDP114"}, 2),
])
def test_each_planted_fault_gets_exactly_its_finding(tmp_path, faults, codes, nproc):
    result = run_ddpcheck(["--nproc", str(nproc), TRAIN, "--fault", faults], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.codes == codes
    found = {f["code"]: f for f in result.report["findings"]}
    assert all(f["hint"] for f in found.values())  # the fix from the rule page
    planted = set(faults.split(","))
    if "grad-edit" in planted:
        f = found["DDP105"]
        assert f["ranks"] == [1] and f["details"]["step"] == 1
        assert f["details"]["parameters"] == ["body.0.weight"]
        assert result.check("DDP106")["explained_by"] == "DDP105"  # consequence, folded
    if "no-sync" in planted:
        assert "no_sync()" in found["DDP105"]["message"]
    if "grad-none" in planted:
        assert "body.2.bias (None on rank 1)" in found["DDP105"]["message"]
    if "param-edit" in planted:
        # rank 0 edits after step 1: the first checked step after that shows it, on rank 0 only
        f = found["DDP106"]
        assert f["ranks"] == [0] and f["details"]["step"] == 2
        assert f["details"]["parameters"] == ["body.2.bias"]
    if "no-set-epoch" in planted:
        f = found["DDP103"]
        assert f["details"]["epoch"] == 1 and "'loader'" in f["message"]
    if "unwrapped-model" in planted:
        assert result.check("DDP105")["explained_by"] == "DDP109"  # not a second finding
    if "no-sampler" in planted:
        assert result.check("DDP104")["explained_by"] == "DDP100"
        assert "every rank read the whole dataset" in found["DDP100"]["message"]
    if "tcp-init" in planted:
        assert "tcp://127.0.0.1:29999" in found["DDP113"]["message"]
    if "bad-world-size" in planted:
        f = found["DDP114"]
        assert "world_size=8" in f["message"] and "WORLD_SIZE=2" in f["message"]
    if "unused-param" in planted:
        assert found["DDP112"]["details"]["parameters"] == ["aux.bias", "aux.weight"]
    if "buffer-edit" in planted:
        f = found["DDP107"]
        assert f["details"]["buffers"] == ["scale"] and f["details"]["step"] == 2


def test_padding_of_1001_samples_on_4_ranks_passes_and_cadence_is_kept(tmp_path):
    result = run_ddpcheck(["--nproc", "4", "--check-first", "2", "--check-every", "3",
                           TRAIN, "--samples", "1001"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.codes == set()
    overlap = result.check("DDP101")
    assert overlap["status"] == "pass" and "3 padding repeats" in overlap["detail"]
    job = result.report["run"]["job"]
    # ceil(1001 / 4) = 251 samples per rank, 32 batches of 8, 2 epochs = 64 steps;
    # checked: steps 1, 2, then every 3rd: 3, 6, ..., 63 -> 23
    assert (job["world_size"], job["steps"], job["checked_steps"]) == (4, 64, 23)


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(_cuda_devices() < 2, reason="the NCCL path needs two GPUs")
def test_nccl_on_gpus_passes_every_check(tmp_path):
    result = run_ddpcheck(["--nproc", "2", TRAIN, "--device", "cuda"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.codes == set()
    assert result.status("DDP110") == "pass"
