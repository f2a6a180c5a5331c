"""Files ddpcheck could not check, through the real entry point: one that cannot be read
(DDP902) and one ddpcheck itself fails on (DDP903) are one error line each, the other files
are still linted and reported, the exit status is 2, and every output format shows the file as
not checked — never as clean."""

from __future__ import annotations

import json
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, cli_env, run_cli

SCHEMA = json.loads((ROOT / "ddpcheck" / "report" / "report.schema.json").read_text())

TRAIN = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    dist.destroy_process_group()
    """
)

# A module-level value read off a call's result (`load_config().train`): a value, not an alias.
CONFIG_FROM_CALL = textwrap.dedent(
    """\
    import torch.distributed as dist

    def load_config():
        return None

    epochs = load_config().epochs
    if int(epochs) == 0:
        print("nothing to train")
    dist.init_process_group("gloo")
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "legacy.py").write_bytes(b'# notes\nNAME = "caf\xe9"\n')  # Latin-1, no declaration
    return tmp_path


def test_value_read_off_a_call_result_is_linted_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "setup_run.py").write_text(CONFIG_FROM_CALL)
    (tmp_path / "train.py").write_text(TRAIN)
    r = run_cli("lint", "--no-cache", "--output-format", "concise", str(tmp_path / "setup_run.py"),
                str(tmp_path / "train.py"))
    assert "internal error" not in r.stderr
    assert r.returncode == 1, r.stderr
    assert f"{tmp_path / 'setup_run.py'}:9:1: DDP005" in r.stdout
    assert f"{tmp_path / 'train.py'}:5:10: DDP001" in r.stdout


# --- a file that cannot be read ------------------------------------------------------------------
def test_unreadable_file_text_summary_is_not_all_passed(project: Path) -> None:
    for fmt in ("full", "concise"):
        r = run_cli("lint", "--no-cache", "--output-format", fmt, str(project / "legacy.py"))
        assert r.returncode == 2
        assert f"ddpcheck: error: {project / 'legacy.py'}: cannot read: not valid utf-8" in r.stderr
        assert "All checks passed!" not in r.stdout
        assert "Found 0 findings; 1 file could not be checked (see errors above)" in r.stdout


def test_unreadable_file_beside_findings(project: Path) -> None:
    r = run_cli("lint", "--no-cache", str(project))
    assert r.returncode == 2
    assert "Found 1 finding; 1 file could not be checked (see errors above):" in r.stdout
    assert "DDP001" in r.stdout


def test_unreadable_file_in_json(project: Path) -> None:
    r = run_cli("lint", "--no-cache", "--output-format", "json", str(project))
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert [f["code"] for f in doc["findings"]] == ["DDP001"]
    [error] = doc["errors"]
    assert error["path"] == str(project / "legacy.py") and error["code"] == "DDP902"
    assert error["message"].startswith("cannot read: not valid utf-8 (byte 0xe9")


def test_unreadable_file_in_sarif(project: Path) -> None:
    r = run_cli("lint", "--no-cache", "--output-format", "sarif", str(project))
    assert r.returncode == 2
    run = json.loads(r.stdout)["runs"][0]
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False
    [note] = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "not valid utf-8" in note["message"]["text"]
    location = note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert location.endswith("legacy.py")
    rule = note["associatedRule"]
    assert run["tool"]["driver"]["rules"][rule["index"]]["id"] == rule["id"] == "DDP902"
    assert [res["ruleId"] for res in run["results"]] == ["DDP001"]


def test_clean_sarif_run_is_successful(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("print('hello')\n")
    r = run_cli("lint", "--no-cache", "--output-format", "sarif", str(tmp_path / "ok.py"))
    assert r.returncode == 0
    [invocation] = json.loads(r.stdout)["runs"][0]["invocations"]
    assert invocation == {"executionSuccessful": True, "toolExecutionNotifications": []}


def test_unreadable_file_in_junit(project: Path) -> None:
    r = run_cli("lint", "--no-cache", "--output-format", "junit", str(project))
    assert r.returncode == 2
    root = ET.fromstring(r.stdout)
    assert root.get("errors") == "1" and root.get("failures") == "1"
    suite = next(s for s in root.iter("testsuite") if s.get("name") == str(project / "legacy.py"))
    assert suite.get("errors") == "1"
    [case] = suite.findall("testcase")
    assert case.get("name") == "DDP902 unreadable-file"
    error = case.find("error")
    assert error is not None and "not valid utf-8" in (error.get("message") or "")
    assert all(c.get("name") != "all checks" for c in suite.iter("testcase"))


def test_unreadable_file_in_github(project: Path) -> None:
    r = run_cli("lint", "--no-cache", "--output-format", "github", str(project))
    assert r.returncode == 2
    lines = r.stdout.splitlines()
    assert any(line.startswith(f"::error file={project / 'legacy.py'},title=ddpcheck (DDP902)::"
                               "DDP902 unreadable-file: cannot read: not valid utf-8") for line in lines)
    assert any(line.startswith("::warning ") and "DDP001" in line for line in lines)


def test_missing_path_in_json(tmp_path: Path) -> None:
    r = run_cli("lint", "--no-cache", "--output-format", "json", str(tmp_path / "nope.py"))
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["errors"] == [{"path": str(tmp_path / "nope.py"), "code": "DDP902",
                              "message": "no such file or directory"}]


# --- ddpcheck fails on one file ------------------------------------------------------------------
# The real `ddpcheck lint` entry point, with the engine made to fail on files holding a marker:
# how a bug of ours on one file looks to the user.
FAILING = textwrap.dedent(
    """\
    import sys

    import ddpcheck.lint.engine as engine
    from ddpcheck.cli import main

    original = engine.lint_source

    def failing(path, source, *args, **kwargs):
        if "BREAKS_DDPCHECK" in source:
            raise AssertionError("model lost track of a value")
        return original(path, source, *args, **kwargs)

    engine.lint_source = failing
    main(sys.argv[1:])
    """
)


def run_failing(*args: str, cwd: Path, **env: str):
    import subprocess

    (cwd / "_failing_ddpcheck.py").write_text(FAILING)
    return subprocess.run([sys.executable, str(cwd / "_failing_ddpcheck.py"), *args], cwd=cwd,
                          capture_output=True, text=True, env=cli_env(**env), timeout=120)


@pytest.fixture
def broken_project(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a_broken.py").write_text("import torch.distributed as dist  # BREAKS_DDPCHECK\n"
                                     "dist.init_process_group('gloo')\n")
    (src / "train.py").write_text(TRAIN)
    return tmp_path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_internal_error_is_one_line_for_that_file(broken_project: Path, jobs: str) -> None:
    r = run_failing("lint", "--no-cache", "-j", jobs, "--output-format", "concise", "src", cwd=broken_project)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "ddpcheck: error: src/a_broken.py: internal error in ddpcheck: AssertionError: model lost track "
        "of a value; please report it (DDPCHECK_DEBUG=1 shows the traceback)"]
    assert "src/train.py:5:10: DDP001" in r.stdout  # the other file is linted and reported
    assert "Found 1 finding; 1 file could not be checked (see errors above):" in r.stdout


def test_internal_error_traceback_with_debug(broken_project: Path) -> None:
    r = run_failing("lint", "--no-cache", "src", cwd=broken_project, DDPCHECK_DEBUG="1")
    assert r.returncode == 2
    assert "Traceback (most recent call last)" in r.stderr
    assert "AssertionError: model lost track of a value" in r.stderr
    assert "src/train.py:5:10: DDP001" in r.stdout


def test_internal_error_not_cached(broken_project: Path) -> None:
    for _ in range(2):  # a failed file is not remembered as clean
        r = run_failing("lint", "src", cwd=broken_project, DDPCHECK_CACHE_DIR=str(broken_project / "cache"))
        assert r.returncode == 2
        assert "src/a_broken.py: internal error in ddpcheck" in r.stderr


@pytest.mark.parametrize("fmt", ["json", "sarif", "junit", "github"])
def test_internal_error_in_every_format(broken_project: Path, fmt: str) -> None:
    r = run_failing("lint", "--no-cache", "--output-format", fmt, "src", cwd=broken_project)
    assert r.returncode == 2
    if fmt == "json":
        doc = json.loads(r.stdout)
        jsonschema.validate(doc, SCHEMA)
        [error] = doc["errors"]
        assert error["path"] == "src/a_broken.py" and error["code"] == "DDP903"
        assert "AssertionError: model lost track of a value" in error["message"]
    elif fmt == "sarif":
        [invocation] = json.loads(r.stdout)["runs"][0]["invocations"]
        assert invocation["executionSuccessful"] is False
        assert invocation["toolExecutionNotifications"][0]["associatedRule"]["id"] == "DDP903"
    elif fmt == "junit":
        root = ET.fromstring(r.stdout)
        suite = next(s for s in root.iter("testsuite") if s.get("name") == "src/a_broken.py")
        names = [c.get("name") for c in suite.iter("testcase")]
        assert names == ["DDP903 internal-error"]  # not "all checks": it was not checked
    else:
        assert any(line.startswith("::error file=src/a_broken.py,title=ddpcheck (DDP903)::DDP903 internal-error: ")
                   for line in r.stdout.splitlines())


def test_internal_error_on_stdin(tmp_path: Path) -> None:
    (tmp_path / "_failing_ddpcheck.py").write_text(FAILING)
    import subprocess

    r = subprocess.run([sys.executable, str(tmp_path / "_failing_ddpcheck.py"), "lint", "--no-cache",
                        "--stdin-filename", "train.py", "-"], input="x = 1  # BREAKS_DDPCHECK\n",
                       cwd=tmp_path, capture_output=True, text=True, env=cli_env(), timeout=120)
    assert r.returncode == 2
    assert "ddpcheck: error: train.py: internal error in ddpcheck: AssertionError" in r.stderr
    assert "All checks passed!" not in r.stdout
