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
    # The checks left out share one line below the table (--show-skipped lists them)
    left_out = [line for line in result.stdout.splitlines() if "not selected:" in line]
    assert len(left_out) == 1 and "not selected: DDP100–DDP102, DDP110–DDP116" in left_out[0], result.stdout
    assert not any(line.startswith("│ not run") for line in result.stdout.splitlines())
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
    (["--report", EXITS, EXITS], "that is the script being run"),
    (["--nproc", "0", EXITS], "ddpcheck run: --nproc 0: expected 1 or more processes"),
    (["--nproc-per-node", "-1", EXITS], "ddpcheck run: --nproc-per-node -1: expected 1 or more processes"),
    (["--nnodes", "0", EXITS], "ddpcheck run: --nnodes 0: expected 1 or more nodes"),
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
        "lifecycle, rendezvous, evaluation, model, collectives, timing, find-unused, checkpointing, "
        "augmentation, nodes"]


MARKER_SCRIPT = """
import pathlib, sys
pathlib.Path(sys.argv[1]).write_text("launched")
"""


@pytest.mark.parametrize(("flag", "example"), [("--report", "report.json"), ("--html", "report.html")])
def test_a_report_path_that_is_a_directory_is_refused_before_launching(tmp_path, monkeypatch, capsys, flag, example):
    # In-process, from the script's folder (`ddpcheck run` calls this very function): nothing is
    # launched, so no interpreter of its own is needed.
    import os

    from ddpcheck.run.launcher.entry import main

    script, marker, folder = tmp_path / "train.py", tmp_path / "launched", tmp_path / "rep"
    script.write_text(MARKER_SCRIPT)
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["--nproc", "2", flag, "rep", "train.py", str(marker)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ddpcheck run: {flag} rep: is a directory; give a file path such as {os.path.join('rep', example)}"]
    assert not marker.exists()  # nothing was launched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep", "train.py"] and not list(folder.iterdir())


@pytest.mark.parametrize(("target", "says"), [
    (["-m", "no.such.module"], "ddpcheck run: -m no.such.module: no module named 'no' in the current directory"),
    (["-m", "pkg.nosuch"], "ddpcheck run: -m pkg.nosuch: no module named 'pkg.nosuch' in the current directory"),
    (["-m", "pkg"], "ddpcheck run: -m pkg: is a package without __main__.py and cannot be run"),
    (["-m", "ns.sub.nosuch"], "ddpcheck run: -m ns.sub.nosuch: no module named 'ns.sub.nosuch'"),
    (["pkg"], "ddpcheck run: pkg: is a directory; give a path to a Python file or -m MODULE"),
    (["missing.py"], "ddpcheck run: missing.py: no such script"),
])
def test_a_target_that_cannot_be_found_is_refused_before_launching(tmp_path, monkeypatch, capsys, target, says):
    # In-process, from the project's folder (`ddpcheck run` calls this very function; the module
    # search puts the current directory first on sys.path, as the ranks' `python -m` would).
    from ddpcheck.run.launcher.entry import main

    (tmp_path / "pkg").mkdir()
    (tmp_path / "ns" / "sub").mkdir(parents=True)  # namespace packages (no __init__.py)
    (tmp_path / "ns" / "sub" / "train.py").write_text("")
    # The package leaves a mark when a rank imports it.
    (tmp_path / "pkg" / "__init__.py").write_text(
        "import os, pathlib\nif 'RANK' in os.environ:\n    pathlib.Path('launched').write_text('x')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--nproc", "2", *target]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), err
    assert not (tmp_path / "launched").exists() and "Traceback" not in err


@pytest.mark.slow
def test_a_module_in_the_current_directory_is_found(tmp_path):
    from rt_helpers import subprocess_env  # noqa: F401 - run_ddpcheck sets the environment

    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    # One write per rank: the ranks share the job's stdout, and print's separate writes of its
    # arguments can interleave between them.
    (tmp_path / "jobs" / "hello.py").write_text("print(f'hello from {__name__}')\n")
    result = run_ddpcheck(["--nproc", "2", "-m", "jobs.hello"], tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("hello from __main__") == 2


WRITES_OVER_REPORT = """
import os, sys
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    os.makedirs(sys.argv[1])  # the report's path is taken while the job runs
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_report_that_cannot_be_written_at_the_end_is_one_line_and_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(WRITES_OVER_REPORT)
    report = out / "run.json"
    result = run_ddpcheck(["--nproc", "2", "--report", str(report), str(script), str(report)], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "ddpcheck run:" in line]
    assert len(said) == 1 and said[0].startswith("ddpcheck run: --report ") and "cannot write it" in said[0]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "train.py on 2 ranks" in result.stdout  # the rest is still shown
    assert sorted(p.name for p in out.iterdir()) == ["run.json"] and report.is_dir()


CRASHES_BEFORE_DDP = """
import torch
import torch.distributed as dist


def stats(values):
    total = torch.tensor(values)
    dist.all_reduce(total, op="mean")
    return total


dist.init_process_group("gloo")
print(stats([1.0, 2.0]))
"""


@pytest.mark.slow
def test_a_crash_shows_the_users_own_traceback_and_one_row_for_the_checks_it_stopped(tmp_path):
    script = tmp_path / "stats.py"
    script.write_text(CRASHES_BEFORE_DDP)
    result = run_ddpcheck(["--nproc", "2", str(script)], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    # The traceback each rank prints is the one `python stats.py` prints: no frame of ddpcheck's
    # bootstrap, of runpy, or of the hooks around torch's collectives.
    # (one per rank that got to print it: torchrun may stop the other rank first)
    tracebacks = result.stderr.count("Traceback (most recent call last):")
    assert tracebacks >= 1, result.stderr
    assert "ddpcheck" not in result.stderr.replace("ddpcheck-torchrun", "")
    assert "runpy" not in result.stderr
    assert result.stderr.count(f'File "{script}", line 8, in stats') == tracebacks
    # ... the report keeps the whole of it
    error = result.report["run"]["ranks"][0]["error"]
    assert "bootstrap.py" in error["traceback"] and error["type"] == "TypeError"
    # One row for the checks the crash kept from running, one entry each in the JSON
    unreached = [c for c in result.report["run"]["checks"] if c["status"] == "not-reached"]
    assert len(unreached) > 10 and len({c["detail"] for c in unreached}) == 1
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ not reached")]
    assert len(rows) == 1, result.stdout
    assert "DDP100–DDP107" in rows[0] and f"{len(unreached)} checks" in rows[0]
    assert "not reached: rank" not in result.stdout
    assert "crashed (TypeError" in rows[0]  # the reason, said once


@pytest.mark.slow
def test_a_script_with_a_syntax_error_is_a_crash_at_its_line_told_as_python_tells_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n\ndef main(:\n    pass\n")
    result = run_ddpcheck(["--nproc", "2", str(script)], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.codes == {"DDP120"}
    found = result.report["findings"][0]
    assert found["location"]["line"] == 3 and "raised SyntaxError: invalid syntax" in found["message"]
    # What `python train.py` prints (once per rank that got to print it), and nothing of
    # ddpcheck's or runpy's.
    said = f'  File "{script}", line 3\n    def main(:\n             ^\nSyntaxError: invalid syntax\n'
    assert result.stderr.count(said) >= 1 and result.stderr.count("SyntaxError") == result.stderr.count(said), \
        result.stderr
    assert "Traceback" not in result.stderr and "runpy" not in result.stderr


EXITS_EARLY_ON_ONE_RANK = """
import sys
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    sys.exit(0)
model = DDP(nn.Linear(8, 1))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_that_exits_0_before_the_others_collective_is_named_as_the_one_that_left(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(EXITS_EARLY_ON_ONE_RANK)
    result = run_ddpcheck(["--nproc", "2", str(script)], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    crash = next(f for f in result.report["findings"] if f["code"] == "DDP120")
    assert crash["message"].startswith("rank 1 exited with 0 at train.py:10 while the other ranks were still "
                                       "in a collective"), crash["message"]
    assert "DDP128" not in result.codes  # rank 0's DDP construction is not under an `if` on the rank
