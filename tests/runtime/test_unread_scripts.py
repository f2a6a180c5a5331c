"""Scripts written the way public DDP code is written, that earlier versions judged wrongly on
first contact: each is a real 2-rank torchrun job on CPU with gloo through `ddpcheck run`.

- a trainer that peeks at one batch before `set_epoch` and evaluates after training;
- a small CPU script that prints what the machine has and evaluates on every rank;
- ranks that make their own data;
- data parallelism without the DDP wrapper (gradients averaged by hand, ZeroRedundancyOptimizer,
  a sharded optimizer that reduces inside its step);
- a model that differs across ranks when it is wrapped.
"""

from __future__ import annotations

import pytest

from diag_jobs import assert_no_survivors, ddpcheck_run, fixture

pytestmark = pytest.mark.slow


def check(data: dict, code: str) -> dict:
    return next(c for c in data["run"]["checks"] if c["code"] == code)


def findings(data: dict) -> dict[str, dict]:
    return {f["code"]: f for f in data["findings"]}


def line_of(path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if text in t)


def test_peek_before_set_epoch_then_full_epochs_and_evaluation_passes(tmp_path):
    script = fixture("peek_trainer.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--epochs", "3"], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Only the note that this GPU-style script ran with CUDA emulated.
    assert list(findings(data)) == ["DDP122"], [f["message"] for f in data["findings"]]
    assert check(data, "DDP103")["status"] == "pass"
    assert check(data, "DDP100")["status"] == "pass"
    # The ranks made their own random test sets: evaluating all of each is not redundant work.
    assert check(data, "DDP115")["status"] == "pass"
    assert "each rank's own data" in check(data, "DDP115")["detail"]
    # The epoch count is the training passes', not every iter(): 96 samples, 2 ranks, batch 8.
    assert "96/96 samples drawn in epoch 0" in check(data, "DDP102")["detail"]
    assert "'train_loader'" in check(data, "DDP101")["detail"]
    # Skipped checks share one line unless asked for.
    assert "--show-skipped lists them" in proc.stdout
    assert "│ skip" not in proc.stdout

    # Without set_epoch: the training epochs repeat one order. A warning, at the loader's line.
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--epochs", "3", "--no-set-epoch"], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = findings(data)
    assert set(found) == {"DDP103", "DDP122"}, found
    same = found["DDP103"]
    assert same["severity"] == "warning"
    assert "training epochs 0 and 1" in same["message"] and "sampler.epoch stayed 0" in same["message"]
    assert "DataLoader 'train_loader'" in same["message"]
    assert same["path"].endswith("peek_trainer.py")
    assert same["location"]["line"] == line_of(script, "train_loader = DataLoader(")
    assert check(data, "DDP103")["severity"] == "warning"
    assert "0 failed, 1 warning," in proc.stdout and "│ warning │ DDP103" in proc.stdout

    # The same script where every rank reads the same seeded data without a sampler: DDP100 stays.
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--epochs", "2", "--same-data"], tmp_path)
    assert_no_survivors(mark)
    found = findings(data)
    assert "DDP100" in found and found["DDP100"]["severity"] == "error"
    assert "DataLoader 'train_loader'" in found["DDP100"]["message"]
    assert found["DDP115"]["severity"] == "info"  # the unsharded test set: advice
    assert "DataLoader 'test_loader'" in found["DDP115"]["message"]


def test_cpu_script_sees_no_gpu_evaluates_on_every_rank_and_is_timed(tmp_path):
    script = fixture("cpu_book_style.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--show-skipped", str(script), "--epochs", "7"], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Both ranks print to one stream: `print(a, b)` writes its parts separately, so the two
    # ranks' lines may interleave between the parts; each part is one write.
    assert proc.stdout.count("CUDA available:") == 2, proc.stdout
    assert proc.stdout.count("Number of GPUs available:") == 2, proc.stdout
    assert "available: True" not in proc.stdout, proc.stdout
    found = findings(data)
    assert list(found) == ["DDP115"], [f["message"] for f in data["findings"]]
    advice = found["DDP115"]
    assert advice["severity"] == "info"
    assert "DataLoader 'test_loader'" in advice["message"] and "every rank read all 4 samples" in advice["message"]
    assert advice["location"]["line"] == line_of(script, "test_loader = DataLoader(")
    for code in ("DDP100", "DDP101", "DDP103", "DDP105", "DDP106", "DDP109"):
        assert check(data, code)["status"] == "pass", (code, check(data, code))
    assert check(data, "DDP114")["detail"] == "rank and world_size passed explicitly, the launcher's values on every rank"
    assert "emulated" not in proc.stdout + proc.stderr
    assert not data["run"]["performance"]["emulated"]
    for code in ("DDP140", "DDP141", "DDP142"):  # the CPU's timings are the job's
        assert "emulated" not in check(data, code)["detail"], check(data, code)
    assert "1 advice" in proc.stdout and "0 failed" in proc.stdout
    assert "│ skip   │ DDP147" in proc.stdout  # --show-skipped: every row


@pytest.mark.parametrize("seed", ["rank", "none", "split"])
def test_ranks_that_make_their_own_data_do_not_train_on_the_same_data(tmp_path, seed):
    script = fixture("own_data.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--seed", seed], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data["findings"] == [], [f["message"] for f in data["findings"]]
    assert check(data, "DDP100")["status"] == "pass"
    assert "from their own data" in check(data, "DDP100")["detail"]
    assert check(data, "DDP104")["status"] == "pass"


def test_the_same_data_on_every_rank_and_a_missing_process_group(tmp_path):
    script = fixture("own_data.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--seed", "same"], tmp_path)
    assert_no_survivors(mark)
    found = findings(data)
    assert set(found) == {"DDP100"}, found
    assert found["DDP100"]["location"]["line"] == line_of(script, "train_loader = DataLoader(")
    assert check(data, "DDP104")["explained_by"] == "DDP100"

    # Rank 1 is also slower in every step; without a process group no rank waits for it.
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--seed", "same", "--no-init",
                                     "--slow-rank", "1"], tmp_path)
    assert_no_survivors(mark)
    assert set(findings(data)) == {"DDP108"}, [f["message"] for f in data["findings"]]
    assert check(data, "DDP100")["status"] == "skip"
    assert check(data, "DDP100")["explained_by"] == "DDP108"
    assert check(data, "DDP140")["explained_by"] == "DDP108"


@pytest.mark.parametrize("how", ["allreduce", "flat", "zero", "sharded"])
def test_gradients_averaged_without_the_ddp_wrapper(tmp_path, how):
    script = fixture("hand_reduce.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--how", how], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data["findings"] == [], [f["message"] for f in data["findings"]]
    assert check(data, "DDP109")["status"] == "pass"
    assert check(data, "DDP109")["detail"].startswith("no DistributedDataParallel model: ")
    assert check(data, "DDP106")["status"] == "pass"
    assert data["run"]["job"]["steps"] == 6  # ZeroRedundancyOptimizer's inner step is not a step
    if how == "sharded":  # reduced inside the optimizer's step: compared through the parameters
        assert check(data, "DDP105")["status"] == "skip"
        assert "ShardedSGD reduces the gradients inside its step" in check(data, "DDP105")["detail"]
    else:
        assert check(data, "DDP105")["status"] == "pass"


@pytest.mark.parametrize("how, named", [
    ("skip-head", "head.weight, head.bias"),
    ("divide-rank0", "body.0.weight, body.0.bias, head.weight, head.bias"),
])
def test_a_gradient_averaged_wrongly_by_hand_is_named(tmp_path, how, named):
    script = fixture("hand_reduce.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--how", how], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = findings(data)
    assert set(found) == {"DDP105"}, [f["message"] for f in data["findings"]]
    message = found["DDP105"]["message"]
    assert "optimizer step 1" in message and f": {named}." in message, message
    assert "averages the gradients itself" in message
    assert check(data, "DDP105")["details"]["parameters"] == named.split(", ")
    # The script does reduce: not "no DDP, nothing all-reduces".
    assert check(data, "DDP109")["status"] == "pass"
    assert check(data, "DDP106")["explained_by"] == "DDP105"


@pytest.mark.parametrize("how", ["none", "loss-only"])
def test_ranks_that_train_alone_without_ddp_still_fail(tmp_path, how):
    # An all-reduce of the loss for the log is not gradients averaged by hand.
    script = fixture("hand_reduce.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--how", how], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 1
    found = findings(data)
    assert set(found) == {"DDP109"} and found["DDP109"]["severity"] == "error"
    assert check(data, "DDP105")["explained_by"] == "DDP109"


@pytest.mark.parametrize("how, expected, built, changed", [
    ("branch", ["rank 0: 'aux_head.weight' [3, 16] float32", "rank 1: no such parameter",
                "rank 0: 6 parameters, rank 1: 4 parameters"], "self.aux_head = nn.Linear", None),
    ("lazy", ["rank 0: '0.weight' [16, 8] float32", "rank 1: '0.weight' [16, 9] float32"],
     "nn.LazyLinear(16)", "model(torch.randn(4, 8 + rank))"),
    ("frozen", ["rank 0: 'body.weight' [16, 8] float32", "rank 1: 'body.weight' [16, 8] float32 requires_grad=False"],
     "self.body = nn.Linear", "model.body.requires_grad_(False)"),
    ("dtype", ["rank 0: 'head.weight' [2, 16] float32", "rank 1: 'head.weight' [2, 16] float64"],
     "self.head = nn.Linear", "model.head.double()"),
])
def test_a_model_that_differs_across_ranks_is_named_at_the_wrap(tmp_path, how, expected, built, changed):
    script = fixture("rank_model.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", "--hang-timeout", "20", str(script), "--how", how], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = findings(data)
    assert list(found) == ["DDP116"], [f["message"] for f in data["findings"]]  # torch's crash folds into it
    message = found["DDP116"]["message"]
    for text in expected:
        assert text in message, message
    assert f"built at rank_model.py:{line_of(script, built)}" in message, message
    last = changed or built
    if changed:
        assert f"rank_model.py:{line_of(script, changed)}" in message, message
    assert found["DDP116"]["location"]["line"] == line_of(script, last)


def test_the_same_model_everywhere_passes_the_wrap_comparison(tmp_path):
    script = fixture("rank_model.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--how", "same"], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data["findings"] == [], [f["message"] for f in data["findings"]]
    assert check(data, "DDP116")["status"] == "pass"
    assert check(data, "DDP116")["detail"].startswith("the same 4 parameters")
