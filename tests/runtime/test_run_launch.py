"""How `ddpcheck run` launches and ends: exit codes, -m MODULE, usage errors."""

from __future__ import annotations

import pytest

from rt_helpers import FIXTURES, run_ddpcheck

EXITS = str(FIXTURES / "exits.py")


@pytest.mark.slow
def test_script_exit_code_is_kept(tmp_path):
    result = run_ddpcheck(["--nproc", "2", EXITS, "exit3"], tmp_path)
    assert result.returncode == 3
    assert result.report["job"]["script_exit_code"] == 3
    assert result.codes == set()  # checks still ran and passed
    assert result.status("DDP105") == "pass"


@pytest.mark.slow
def test_uncaught_exception_exits_1_and_reports_what_was_checked(tmp_path):
    result = run_ddpcheck(["--nproc", "2", EXITS, "raise"], tmp_path)
    assert result.returncode == 1
    assert "RuntimeError: planted failure" in result.stderr
    # The crash itself is the one finding (issue 5); the crashed rank's missing destroy is not one.
    assert result.codes == {"DDP120"}
    ranks = {r["rank"]: r for r in result.report["ranks"]}
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
    (["--nproc", "2", "--nproc-per-node", "2", EXITS], "either --nproc or --nproc-per-node"),
    (["--check-every", "x", EXITS], "--check-every: expected a whole number"),
    (["no/such/script.py"], "no/such/script.py: no such script"),
    (["--no-python", EXITS], "--no-python is not supported"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, says):
    result = run_ddpcheck(args, tmp_path)
    assert result.returncode == 2
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
