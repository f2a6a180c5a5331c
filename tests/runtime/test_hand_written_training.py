"""Training that neither wraps the model in DDP nor steps a torch.optim optimizer (a ZeRO stage-0
engine: all-reduce every gradient by hand, update the parameters in place), run through the real
entry point on 2 gloo ranks: the run is training, never "ended before training"; and what the
script printed or raised is quoted without terminal escape sequences."""

from __future__ import annotations

import pytest

from diag_jobs import assert_no_survivors, codes, ddpcheck_run, finding, fixture

pytestmark = pytest.mark.slow


def test_hand_reduced_gradients_and_in_place_updates_are_training(tmp_path):
    script = fixture("manual_sgd_allreduce.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DDP130" not in codes(data), codes(data)
    assert "Nothing was trained" not in proc.stdout
    assert not [c for c in data["run"]["checks"] if c["status"] == "fail"], data["run"]["checks"]
    unreached = {c["code"]: c["detail"] for c in data["run"]["checks"] if c["status"] == "not-reached"}
    assert unreached, "checks of a DDP model have nothing to judge here"
    for code, detail in unreached.items():
        assert "ended before" not in detail, (code, detail)
        assert "the script trained (backward passes) without" in detail, (code, detail)
    # No optimizer step to compare at: the parameters it updated itself are compared at the end.
    params = next(c for c in data["run"]["checks"] if c["code"] == "DDP106")
    assert params["status"] == "pass" and "at the end of the run" in params["detail"], params
    assert_no_survivors(mark)


def test_a_layer_updated_without_the_all_reduce_is_named_at_the_end(tmp_path):
    script = fixture("manual_sgd_allreduce.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--skip-head"], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert codes(data) == ["DDP106"], codes(data)
    message = finding(data, "DDP106")["message"]
    assert "at the end of the run" in message and ": 2.bias, 2.weight." in message, message
    assert "no optimizer step to compare at" in message


def test_crash_message_is_quoted_without_terminal_escapes(tmp_path):
    script = fixture("manual_sgd_allreduce.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--fail-on-rank", "1"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crash = finding(data, "DDP120")
    assert "Weights only load failed. Re-running with weights_only=False" in crash["message"], crash
    assert "\x1b" not in crash["message"] and "[1m" not in crash["message"], crash["message"]
    assert "\x1b" not in str(crash.get("details", {}).get("traceback", ""))
    summary = [line for line in proc.stdout.splitlines() if line.startswith("DDP120")]
    assert summary and all("\x1b" not in line and "[1m" not in line for line in summary), summary
    assert_no_survivors(mark)


@pytest.mark.parametrize("api", ["wrapper", "fully_shard"])
def test_sharded_parameters_are_not_compared_as_whole_tensors(tmp_path, api):
    # FSDP keeps one shard of each flat parameter per rank: they differ by design. A check that
    # cannot gather them says so and skips; it neither fails nor passes on nothing compared.
    script = fixture("fsdp_cpu.py", tmp_path)
    proc, data, mark = ddpcheck_run(["--nproc", "2", str(script), "--api", api], tmp_path)
    assert_no_survivors(mark)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(data) == [], [f["message"] for f in data["findings"]]
    rows = {c["code"]: c for c in data["run"]["checks"]}
    for code in ("DDP105", "DDP106"):
        assert rows[code]["status"] == "skip", rows[code]
        assert "sharded parameter" in rows[code]["detail"] and "not compared" in rows[code]["detail"]
    assert rows["DDP109"]["status"] == "pass" and "sharded" in rows["DDP109"]["detail"]
