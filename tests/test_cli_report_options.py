"""`--statistics` and `--output-file` through the real entry point."""

from __future__ import annotations

import json
import textwrap

from tests.conftest import cli_env
from tests.helpers import run_lint

SCRIPT = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    a = DataLoader(ds, batch_size=8)
    b = DataLoader(ds, batch_size=8)
    c = DataLoader(ds, shuffle=True, sampler=DistributedSampler(ds, shuffle=False))
    """
)


def test_statistics_counts_per_code_most_frequent_first(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    r = run_lint("--statistics", str(p))
    assert r.returncode == 1
    assert r.stdout == (
        "2\tDDP001\tmissing-distributed-sampler\n"
        "1\tDDP005\tmissing-destroy-process-group\n"
        "1\tDDP006\tshuffle-with-sampler\n"
    )
    # Fixable codes carry Ruff's [*] when the fixes they have would be applied.
    unsafe = run_lint("--statistics", "--unsafe-fixes", str(p))
    assert "1\tDDP006\t[*] shuffle-with-sampler\n" in unsafe.stdout
    doc = json.loads(run_lint("--statistics", "--output-format", "json", str(p)).stdout)
    assert doc[0] == {"code": "DDP001", "name": "missing-distributed-sampler", "count": 2, "fixable": False}
    assert [row["code"] for row in doc] == ["DDP001", "DDP005", "DDP006"]


def test_statistics_on_a_clean_file_prints_nothing_and_exits_0(tmp_path):
    p = tmp_path / "ok.py"
    p.write_text("print('hello')\n")
    r = run_lint("--statistics", str(p))
    assert (r.returncode, r.stdout) == (0, "")


def test_output_file_gets_the_report_stdout_stays_empty(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    out = tmp_path / "reports" / "ddpcheck.json"  # its folder is created
    r = run_lint("--output-format", "json", "--output-file", str(out), str(p))
    assert r.returncode == 1 and r.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["summary"]["total"] == 4
    # The full format written to a file carries no colour codes even when colour is forced.
    full = tmp_path / "report.txt"
    run_lint("-o", str(full), str(p), env=cli_env(FORCE_COLOR="1"))
    assert "DDP001" in full.read_text() and "\x1b[" not in full.read_text()


def test_output_file_that_cannot_be_written_is_one_error_line(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run_lint("--output-file", str(blocker / "report.txt"), str(p))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"ddpcheck: error: --output-file {blocker / 'report.txt'}: cannot write")
