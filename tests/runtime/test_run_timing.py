"""Where the time goes, on real 2-rank gloo jobs through `python -m ddpcheck run`: the dominant phase
of a compute-bound and a data-bound script, a planted straggler named with its phase (and the
HTML report of that run in a real browser), and `--scaling 1,2` with a constant and a scaled
learning rate. Timing on a shared machine is noisy: each fixture makes one phase many times
bigger than the others, and the assertions are about which phase or rank, never tight numbers."""

from __future__ import annotations

import json
import re

import pytest

import jsonschema

from browser import count_color, dump_dom, find_chromium, read_png, screenshot
from ddpcheck.run.launcher.html_report import PHASE_COLORS
from rt_helpers import FIXTURES, ROOT, run_ddpcheck

pytestmark = pytest.mark.slow
SCHEMA = json.loads((ROOT / "ddpcheck" / "report" / "report.schema.json").read_text())


def _perf(result) -> dict:
    assert result.report is not None, result.stderr[-3000:]
    return result.report["run"]["performance"]


def test_a_data_bound_script_waits_for_data_and_is_told_what_to_try(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "data_bound.py"), "--steps", "16"], tmp_path)
    # DDP141 is advice (severity info): reported, but the run does not fail for it.
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    perf = _perf(result)
    assert perf["dominant"]["phase"] == "data" and perf["dominant"]["share"] > 0.5
    assert [r["rank"] for r in perf["ranks"]] == [0, 1]
    assert all(r["phases"]["data"]["median"] > r["phases"]["backward"]["median"] for r in perf["ranks"])
    assert perf["throughput"]["global_batch"] == 32 and perf["throughput"]["samples_per_s"] > 0
    assert perf["straggler"] is None
    assert result.codes == {"DDP141"}
    jsonschema.validate(result.report, SCHEMA)
    finding = next(f for f in result.report["findings"] if f["code"] == "DDP141")
    assert "num_workers (now 0)" in finding["message"]
    # The terminal: the phase table with bars, and the summary line under it.
    assert "Where the time goes" in result.stdout and "dominant phase: data" in result.stdout
    assert "global batch 32" in result.stdout
    assert finding["severity"] == "info" and "0 failed, 1 advice," in result.stdout


def test_a_compute_bound_script_spends_its_steps_in_forward_and_backward(tmp_path):
    result = run_ddpcheck(["--nproc", "2", str(FIXTURES / "compute_bound.py"), "--steps", "16"], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    perf = _perf(result)
    assert perf["dominant"]["phase"] in ("forward", "backward")
    for r in perf["ranks"]:
        compute = r["phases"]["forward"]["median"] + r["phases"]["backward"]["median"]
        assert compute > 5 * r["phases"]["data"]["median"]
    assert result.status("DDP141") == "pass" and result.status("DDP140") == "pass"
    assert perf["throughput"]["global_batch"] == 128
    assert perf["ddp"]["bucket_cap_mb"] == 25  # DDP's own logging data was read


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (CI installs Debian's "
                    "chromium package; `apt-get install -y chromium`)")
def test_the_straggler_is_named_with_its_phase_and_the_html_shows_it(tmp_path):
    page = tmp_path / "report.html"
    result = run_ddpcheck(["--nproc", "2", "--html", str(page), str(FIXTURES / "straggler.py"),
                           "--slow-rank", "1", "--sleep-ms", "80", "--steps", "16"], tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    straggler = _perf(result)["straggler"]
    assert (straggler["rank"], straggler["phase"]) == (1, "other")
    assert 0.04 < straggler["excess_s"] < 0.5  # it sleeps 80 ms per step
    assert result.codes == {"DDP140"}
    finding = result.report["findings"][0]
    assert finding["ranks"] == [1] and "Rank 1 takes" in finding["message"] and "in other" in finding["message"]
    assert "◀ straggler" in result.stdout
    assert "HTML report written to" in result.stdout

    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dump_dom(page)))
    assert "straggler rank 1" in text and "DDP140 straggler-rank" in text
    assert "straggler.py" in text and "rank 0" in text
    shot = screenshot(page, tmp_path / "report.png", height=1400)
    _w, _h, rows = read_png(shot)
    assert count_color(rows, PHASE_COLORS["other"]) > 300  # rank 1's long "other" segment
    assert count_color(rows, PHASE_COLORS["backward"]) > 300  # rank 0 waiting in the reduction


def test_scaling_with_a_constant_learning_rate_reports_the_factor_it_should_have_grown_by(tmp_path):
    result = run_ddpcheck(["--scaling", "1,2", str(FIXTURES / "scaling_train.py"), "--steps", "24"],
                          tmp_path, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    runs = {r["world_size"]: r for r in result.report["run"]["scaling"]["runs"]}
    assert sorted(runs) == [1, 2]
    assert (runs[1]["global_batch"], runs[2]["global_batch"]) == (32, 64)
    assert runs[1]["lr"] == runs[2]["lr"] == pytest.approx(0.1)
    assert runs[2]["lr_expected"] == pytest.approx(0.2)
    assert runs[1]["efficiency"] == pytest.approx(1.0) and runs[2]["efficiency"] > 0
    assert runs[2]["speedup"] == pytest.approx(runs[2]["samples_per_s"] / runs[1]["samples_per_s"])
    assert result.codes == {"DDP143"}
    jsonschema.validate(result.report, SCHEMA)
    assert "grew 2× (32 → 64)" in result.report["findings"][0]["message"]
    assert result.report["run"]["job"]["world_size"] == 2  # the report is the largest run's
    # The terminal: the scaling table with efficiency and the learning rate the rule asks for.
    assert "Scaling" in result.stdout and "efficiency" in result.stdout
    assert "0.1 (rule: 0.2)" in result.stdout
    assert "--scaling: run 2 of 2, 2 ranks" in result.stderr


def test_scaling_with_a_learning_rate_scaled_by_the_world_size_passes(tmp_path):
    result = run_ddpcheck(["--scaling", "1,2", "--quiet", str(FIXTURES / "scaling_train.py"), "--steps", "24",
                           "--scale-lr"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = {r["world_size"]: r for r in result.report["run"]["scaling"]["runs"]}
    assert runs[2]["lr"] == pytest.approx(0.2) and runs[2]["lr_expected"] == pytest.approx(0.2)
    assert result.status("DDP143") == "pass" and result.codes == set()
    assert "(rule:" not in result.stdout


@pytest.mark.parametrize(("args", "said"), [
    (["--scaling", "2"], "at least two"),
    (["--scaling", "1,2", "--nproc", "2"], "drop --nproc"),
])
def test_scaling_usage_errors_are_one_line(tmp_path, capsys, args, said):
    # In-process (`ddpcheck run` calls this very function): no interpreter of its own per case.
    from ddpcheck.run.launcher.entry import main

    report = tmp_path / "report.json"
    assert main(["--report", str(report), *args, str(FIXTURES / "scaling_train.py")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert not report.exists()
