"""The `--html` report: one self-contained file, and what a real browser shows of it.

The report here is built from planted per-rank timing records (rank 2 spends 60 ms per step in its
own code, the others wait for it in backward; each rank yields 800 samples in 2 s) and a planted
scaling table (1, 2, 4 ranks at an unchanged learning rate), through the same summary code a run
uses. The browser tests start Debian's chromium headless and look at the DOM it built and at the
pixels of a screenshot."""

from __future__ import annotations

import re

import pytest

from browser import count_color, dump_dom, find_chromium, read_png, screenshot
from ddpcheck.run.launcher import html_report as html
from ddpcheck.run import performance
from ddpcheck.run.launcher import scaling


def _record(rank: int, slow: bool) -> dict:
    steps = []
    for step in range(2, 30):
        data, fwd, opt = 4000, 9000, 1500
        bwd = 22000 if slow else 82000  # the fast ranks wait 60 ms in the reduction
        other = 60800 if slow else 800
        steps.append([step, data + fwd + bwd + opt + other, data, fwd, bwd, opt, 0, 32, 0, 0])
    return {"rank": rank, "probes": {"timing": {
        "clock": "wall", "device": "cpu", "steps": steps, "samples": 800, "window": [2.0, 800, 25],
        "columns": ["step", "total", "data", "forward", "backward", "optimizer", "collectives",
                    "samples", "ours", "checked"],
        "loaders": [{"num_workers": 2}], "optimizers": [{"class": "SGD", "max": 0.1, "first": 0.1, "last": 0.1}],
    }}}


def _report() -> dict:
    perf = performance.summarise([_record(r, r == 2) for r in range(4)])
    runs = [
        {"world_size": 1, "samples_per_s": 500.0, "global_batch": 32, "lr": 0.1, "step_median": 0.064, "ok": True},
        {"world_size": 2, "samples_per_s": 900.0, "global_batch": 64, "lr": 0.1, "step_median": 0.071, "ok": True},
        {"world_size": 4, "samples_per_s": 1600.0, "global_batch": 128, "lr": 0.1, "step_median": 0.08, "ok": True},
    ]
    block, verdict = scaling.summarise(runs)
    return {
        "run": {
            "job": {"target": "train<script>.py", "args": ["--epochs", "2"], "world_size": 4, "steps": 30,
                    "checked_steps": 20, "exit_code": 1},
            "checks": [{"code": "DDP105", "name": "gradients-differ", "status": "pass", "detail": "identical"}],
            "performance": perf,
            "scaling": block,
        },
        "findings": [
            {"code": "DDP140", "name": "straggler-rank", "severity": "warning",
             "message": performance.straggler_hint(perf["straggler"]), "hint": None, "ranks": [2]},
            {"code": "DDP143", "name": "learning-rate-ignores-world-size", "severity": "warning",
             "message": verdict.message, "hint": None, "ranks": []},
        ],
    }


def test_the_page_is_self_contained_and_escapes_what_the_script_controls():
    page = html.render(_report())
    assert "<script" not in page.replace("train&lt;script&gt;.py", "")  # no script runs
    assert "train&lt;script&gt;.py" in page
    # Nothing is loaded from anywhere: no src/url()/@import, and the policy forbids it anyway.
    assert not re.search(r"\ssrc=|url\(|@import|<link", page)
    assert "default-src 'none'" in page
    links = re.findall(r'href="([^"]+)"', page)
    assert links and all(h.startswith("https://github.com/ddpcheck/ddpcheck/blob/main/rules/DDP") for h in links)
    assert page.count("<svg") == 2  # the phase chart and the scaling chart


def test_the_planted_figures_are_in_the_report():
    report = _report()
    perf = report["run"]["performance"]
    assert perf["straggler"]["rank"] == 2 and perf["straggler"]["phase"] == "other"
    assert perf["straggler"]["excess_s"] == pytest.approx(0.060, abs=0.002)
    assert perf["throughput"]["samples_per_s"] == pytest.approx(1600)
    assert perf["throughput"]["global_batch"] == 128
    runs = {r["world_size"]: r for r in report["run"]["scaling"]["runs"]}
    assert runs[4]["speedup"] == pytest.approx(3.2) and runs[4]["efficiency"] == pytest.approx(0.8)
    assert runs[4]["lr_expected"] == pytest.approx(0.4)
    verdict = report["run"]["scaling"]["lr_verdict"]
    assert "grew 4×" in verdict and "0.4" in verdict


chromium = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (CI installs "
                              "Debian's chromium package; `apt-get install -y chromium`)")


@pytest.mark.slow
@chromium
def test_chromium_renders_the_figures(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html.render(_report()), encoding="utf-8")

    dom = dump_dom(page)
    text = re.sub(r"<[^>]+>", " ", dom)
    text = re.sub(r"\s+", " ", text)
    # The key figures, as the browser built the page.
    assert "1,600 samples/s, all ranks" in text
    assert re.search(r"straggler rank 2 \+60.0 ms per step in other; the others wait \d+% of each step", text)
    assert "efficiency at 4 80%" in text
    assert "0.1 (linear rule: 0.4)" in text
    assert "rank 0" in text and "rank 3" in text
    # Both charts were parsed as SVG with their parts.
    assert len(re.findall(r'<rect class="seg"', dom)) == 4 * 5  # 4 ranks x 5 phases with time
    assert 'class="ideal"' in dom and dom.count('<circle class="pt"') == 3

    shot = screenshot(page, tmp_path / "report.png")
    width, height, rows = read_png(shot)
    assert (width, height) == (1000, 1800)
    # The phase bars were painted in their colours, the straggler's box in red.
    for phase in ("data", "forward", "backward", "other"):
        assert count_color(rows, html.PHASE_COLORS[phase]) > 300, phase
    assert count_color(rows, "#d92d20") > 100  # the straggler KPI border, its label and box
