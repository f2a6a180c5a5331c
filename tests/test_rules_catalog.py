"""`ddpcheck rules` / `explain`, and the rules/ pages that must never drift from the rule classes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddpcheck.catalog import all_rules, render_page
from tests.conftest import ROOT, cli_env, run_cli


def test_pages_match_rule_classes():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "pages.py"), "--check"],
                       capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert r.returncode == 0, r.stdout
    for code in all_rules():
        assert (ROOT / "rules" / f"{code}.md").is_file()


def test_every_code_has_summary_and_fix_advice():
    for code, info in all_rules().items():
        assert info.summary, code
        assert "## How to fix" in info.body, f"{code} page has no '## How to fix'"
        if info.kind != "tool":
            assert "## Why it matters" in info.body, f"{code} page has no '## Why it matters'"


def test_rules_lists_every_code():
    r = run_cli("rules", "--output-format", "json")
    assert r.returncode == 0
    listed = {row["code"] for row in json.loads(r.stdout)}
    assert listed == set(all_rules())
    text = run_cli("rules").stdout
    assert "DDP001" in text and "missing-distributed-sampler" in text


def test_explain_prints_the_page():
    r = run_cli("explain", "DDP001")
    assert r.returncode == 0
    assert r.stdout == render_page(all_rules()["DDP001"])
    assert "## Why it matters" in r.stdout and "```python" in r.stdout
    assert run_cli("explain", "missing-distributed-sampler").stdout == r.stdout


def test_explain_unknown_code():
    r = run_cli("explain", "DDP0001")
    assert r.returncode == 2 and "unknown rule 'DDP0001'" in r.stderr


def test_every_code_is_defined_where_its_kind_lives():
    # One registry: a class that sets `code` registers itself, so a code defined outside the
    # packages the catalogue loads would appear only when something happened to import it.
    from ddpcheck.catalog import SOURCES, classes

    homes = {**SOURCES, "tool": "ddpcheck.tool_codes"}
    for code, cls in classes("lint", "run", "tool").items():
        assert cls.__module__.startswith(homes[cls.kind]), (code, cls.__module__)


def test_a_code_is_taken_once():
    from ddpcheck.describe import Described

    all_rules()  # DDP001 is taken before the attempt, whatever else this worker ran before
    with pytest.raises(RuntimeError, match="duplicate rule code DDP001"):
        type("Again", (Described,), {"code": "DDP001", "name": "again", "__module__": "elsewhere"})
