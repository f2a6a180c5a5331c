"""How `ddpcheck run` launches and ends: exit codes, -m MODULE, usage errors."""

from __future__ import annotations

import json

import jsonschema
import pytest

from rt_helpers import FIXTURES, ROOT, run_ddpcheck

EXITS = str(FIXTURES / "exits.py")
SCHEMA = json.loads((ROOT / "ddpcheck" / "report" / "report.schema.json").read_text())


@pytest.mark.slow
def test_script_exit_2_is_told_apart_from_a_usage_error_and_selection_and_torchrun_options_apply(tmp_path):
    logs = tmp_path / "logs"
    result = run_ddpcheck(["--nproc", "2", "--log-dir", str(logs), "--tee", "3", "--select", "DDP10",
                           "--ignore", "DDP100,DDP101,DDP102", EXITS, "exit2"], tmp_path)
    # The script's own 2 is "the script failed" (3), never ddpcheck's usage error (2).
    assert result.returncode == 3, result.stderr[-3000:]
    assert "the script exited with 2" in result.stdout
    job = result.report["run"]["job"]
    assert (job["script_exit_code"], job["exit_code"]) == (2, 3)
    jsonschema.validate(result.report, SCHEMA)  # the same top-level document as lint's
    assert result.report["command"] == "run" and result.codes == set()
    assert result.status("DDP105") == "pass"  # selected checks still ran and passed
    assert result.status("DDP100") == "not-run" and result.status("DDP112") == "not-run"
    assert job["selected"] == ["DDP103", "DDP104", "DDP105", "DDP106", "DDP107", "DDP108", "DDP109"]
    # torchrun's --log-dir/--tee reached torchrun: each rank's stdout is in its log file too
    teed = [p.read_text() for p in logs.rglob("stdout.log")]
    assert sorted(t.strip() for t in teed) == ["rank 0 trained", "rank 1 trained"]


@pytest.mark.slow
def test_a_rank_that_never_imports_torch_does_not_get_it_imported(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "no_torch.py")], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("torch imported: False") == 2


@pytest.mark.slow
def test_uncaught_exception_exits_1_and_reports_what_was_checked(tmp_path):
    result = run_ddpcheck(["--nproc", "2", EXITS, "raise"], tmp_path)
    assert result.returncode == 1
    assert "RuntimeError: planted failure" in result.stderr
    # The crash itself is the one finding; the crashed rank's missing destroy is not one.
    assert result.codes == {"DDP120"}
    ranks = {r["rank"]: r for r in result.report["run"]["ranks"]}
    assert ranks[1]["exit_code"] == 1 and ranks[1]["error"]["type"] == "RuntimeError"
    assert result.status("DDP105") == "pass"


@pytest.mark.slow
def test_missing_destroy_is_reported_and_run_as_module(tmp_path):
    result = run_ddpcheck(["--nproc", "2", "-m", "fixtures.run.exits", "no-destroy"], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.codes == {"DDP111"}
    assert "rank 0 trained" in result.stdout and "rank 1 trained" in result.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["--checks", "grads,bogus", EXITS], "--checks: unknown check bogus"),
    (["--select", "DDP777", EXITS], "--select: unknown rule code or prefix 'DDP777'"),
    (["--select", "DDP105", "--checks", "grads", EXITS], "give either --select or --checks"),
    (["--nproc", "2", "--nproc-per-node", "2", EXITS], "either --nproc or --nproc-per-node"),
    (["--check-every", "x", EXITS], "--check-every: expected a whole number"),
    (["--output-format", "xml", EXITS], "--output-format: unknown format 'xml'"),
    (["no/such/script.py"], "no/such/script.py: no such script"),
    (["--no-python", EXITS], "--no-python is not supported"),
    (["--nnodes", "x", EXITS], "bad --nproc/--nproc-per-node or --nnodes"),
    ([], "the following arguments are required"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, args, says):
    # 2 is ddpcheck's own: a script that exits 2 makes `ddpcheck run` exit 3 (the test above).
    # In-process (`ddpcheck run` calls this very function): torch is imported once, not per case.
    from ddpcheck.run.launcher.entry import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_usage_error_through_the_cli(tmp_path):
    result = run_ddpcheck(["--checks", "bogus", EXITS], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "--checks: unknown check bogus; choose from shards, set-epoch, inputs, grads, params, "
        "lifecycle, rendezvous, collectives, timing, find-unused, checkpointing, augmentation"]
