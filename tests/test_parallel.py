"""`-j/--jobs` through the real CLI: worker processes find exactly what one process finds."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES, run_cli


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    # The single-file training scripts of the fixtures (over 30 of them): many files per worker. Each
    # once: a second copy of a file only doubled the lint work, not the ways of handing files out.
    d = tmp_path_factory.mktemp("scripts")
    sources = sorted(FIXTURES.glob("lint/*.py")) + sorted(FIXTURES.glob("corpus/*.py"))
    assert len(sources) > 20
    for i, path in enumerate(sources):
        (d / f"train_{i:02d}_{path.name}").write_text(path.read_text())
    (d / "broken.py").write_text("import torch\ndef f(:\n")  # a syntax error travels back too
    return d


def lint(d, *args):
    return run_cli("lint", "--no-cache", "--output-format", "json", *args, ".", cwd=d)


@pytest.mark.slow
def test_two_workers_and_the_default_report_what_one_worker_reports(scripts):
    one = lint(scripts, "-j1")
    assert one.returncode == 1, one.stderr
    assert '"DDP900"' in one.stdout and '"DDP001"' in one.stdout
    assert lint(scripts, "--jobs", "2").stdout == one.stdout
    assert lint(scripts).stdout == one.stdout  # automatic: one worker per CPU here


def test_more_workers_than_files_is_fine(tmp_path):
    (tmp_path / "a.py").write_text("import torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
                                   "dist.init_process_group('gloo')\nDataLoader(ds)\n")
    r = run_cli("lint", "--no-cache", "-j", "8", "--output-format", "concise", str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert "DDP001" in r.stdout


@pytest.mark.parametrize("value", ["0", "-3"])
def test_jobs_below_one_is_a_clear_error(tmp_path, value):
    (tmp_path / "a.py").write_text("import torch\n")
    r = run_cli("lint", f"--jobs={value}", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip() == f"ddpcheck: error: --jobs {value}: must be at least 1 (leave it out to choose automatically)"
