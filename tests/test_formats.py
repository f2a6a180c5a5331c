"""CI and editor formats through the real CLI: junit, sarif (against the real SARIF 2.1.0 schema),
stable SARIF fingerprints, and the concise `path:line:col: CODE message` form editors parse."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, cli_env
from tests.helpers import run_lint

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))

HEADER = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    """
)
# Two findings of one code, on lines 5 and 6.
TWO_LOADERS = HEADER + "train_loader = DataLoader(dataset, batch_size=64)\nextra_loader = DataLoader(other, batch_size=8)\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(TWO_LOADERS)
    (tmp_path / "ok.py").write_text("print('hello')\n")
    (tmp_path / "broken.py").write_text("def train(:\n    pass\n")
    return tmp_path


def lint(project: Path, *args: str):
    # The fixtures here exercise the formats with DDP001 and DDP900 findings only.
    return run_lint("--select", "DDP001,DDP900", *args, cwd=project)


def sarif_of(project: Path, *paths: str) -> dict:
    r = lint(project, "--output-format", "sarif", *paths)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def assert_valid_sarif(doc: dict) -> None:
    validator = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    assert not errors, errors


# --- junit ------------------------------------------------------------------------------------


def test_junit_is_xml_with_a_suite_per_file_a_case_per_code_and_a_failure_per_finding(project):
    r = lint(project, "--output-format", "junit", "bad.py", "ok.py", "broken.py")
    assert r.returncode == 1, r.stderr
    root = ET.fromstring(r.stdout)
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"bad.py", "ok.py", "broken.py"}

    (bad_case,) = suites["bad.py"].findall("testcase")
    assert bad_case.get("classname") == "bad.py"
    assert bad_case.get("name") == "DDP001 missing-distributed-sampler"
    failures = bad_case.findall("failure")
    assert [f.get("type") for f in failures] == ["DDP001", "DDP001"]
    assert [f.get("message").split(":")[:2] for f in failures] == [["5", "16"], ["6", "16"]]
    assert failures[0].text.startswith("bad.py:5:16: DDP001 DataLoader has no DistributedSampler")

    (broken_case,) = suites["broken.py"].findall("testcase")
    assert broken_case.get("name") == "DDP900 syntax-error"
    assert len(broken_case.findall("failure")) == 1

    (ok_case,) = suites["ok.py"].findall("testcase")
    assert ok_case.find("failure") is None

    for name, tests, failed in (("bad.py", 1, 1), ("broken.py", 1, 1), ("ok.py", 1, 0)):
        assert (suites[name].get("tests"), suites[name].get("failures")) == (str(tests), str(failed)), name
        assert suites[name].get("errors") == "0"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")


def test_junit_escapes_markup_in_messages(tmp_path):
    # A file name with XML specials ends up in attributes and text; the document must still parse.
    (tmp_path / "a&b<c>.py").write_text(TWO_LOADERS)
    r = lint(tmp_path, "--output-format", "junit", "a&b<c>.py")
    assert r.returncode == 1, r.stderr
    root = ET.fromstring(r.stdout)
    assert root.find("testsuite").get("name") == "a&b<c>.py"
    assert len(root.findall(".//failure")) == 2


def test_junit_without_findings_is_all_passing(project):
    r = lint(project, "--output-format", "junit", "ok.py")
    assert r.returncode == 0, r.stderr
    root = ET.fromstring(r.stdout)
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
    assert root.find(".//failure") is None


# --- sarif --------------------------------------------------------------------------------------


def test_sarif_validates_against_the_sarif_2_1_0_schema(project):
    for paths in (("bad.py", "ok.py", "broken.py"), ("ok.py",)):
        doc = sarif_of(project, *paths)
        assert_valid_sarif(doc)
    doc = sarif_of(project, "bad.py", "broken.py")
    results = doc["runs"][0]["results"]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results] == [
        ("DDP001", 5), ("DDP001", 6), ("DDP900", 1)]
    location = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "bad.py", "uriBaseId": "%SRCROOT%"}


def test_sarif_is_valid_for_absolute_paths_outside_the_checkout(project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    r = run_lint("--output-format", "sarif", str(project / "bad.py"), cwd=elsewhere)
    doc = json.loads(r.stdout)
    assert_valid_sarif(doc)
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == (project / "bad.py").resolve().as_uri()


def test_sarif_rules_carry_help_text_and_links_to_their_pages(project):
    doc = sarif_of(project, "bad.py", "broken.py")
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    by_id = {rule["id"]: rule for rule in rules}
    for result in doc["runs"][0]["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    for code in ("DDP001", "DDP900"):
        rule = by_id[code]
        assert rule["helpUri"].endswith(f"/rules/{code}.md")
        assert (ROOT / "rules" / f"{code}.md").is_file()  # the link points at a page that exists
        assert rule["shortDescription"]["text"]
        assert rule["helpUri"] in rule["help"]["text"]
        assert "## How to fix" in rule["help"]["markdown"] and rule["helpUri"] in rule["help"]["markdown"]
    assert by_id["DDP001"]["name"] == "missing-distributed-sampler"


def fingerprints(doc: dict) -> list[tuple[int, str]]:
    return [
        (r["locations"][0]["physicalLocation"]["region"]["startLine"], r["partialFingerprints"]["ddpcheck/v1"])
        for r in doc["runs"][0]["results"]
    ]


def test_sarif_fingerprints_survive_lines_inserted_above(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TWO_LOADERS)
    before = fingerprints(sarif_of(tmp_path, "train.py"))
    script.write_text("# a new comment\n\nimport os\n" + TWO_LOADERS)
    after = fingerprints(sarif_of(tmp_path, "train.py"))
    assert [line for line, _ in before] == [5, 6]
    assert [line for line, _ in after] == [8, 9]
    assert [fp for _, fp in after] == [fp for _, fp in before]
    # Changing the offending line itself is a new alert.
    script.write_text(TWO_LOADERS.replace("batch_size=64", "batch_size=32"))
    changed = fingerprints(sarif_of(tmp_path, "train.py"))
    assert changed[0][1] != before[0][1] and changed[1][1] == before[1][1]


def test_identical_findings_get_distinct_fingerprints_that_stay_put(tmp_path):
    twice = HEADER + "loader = DataLoader(dataset, batch_size=64)\n" * 2
    script = tmp_path / "train.py"
    script.write_text(twice)
    first = fingerprints(sarif_of(tmp_path, "train.py"))
    assert len(first) == 2 and first[0][1] != first[1][1]
    script.write_text("import os\n" + twice)
    assert [fp for _, fp in fingerprints(sarif_of(tmp_path, "train.py"))] == [fp for _, fp in first]


def test_sarif_fingerprint_does_not_depend_on_how_the_path_was_named(tmp_path):
    (tmp_path / "train.py").write_text(TWO_LOADERS)
    relative = fingerprints(sarif_of(tmp_path, "train.py"))
    absolute = fingerprints(sarif_of(tmp_path, str(tmp_path / "train.py")))
    assert relative == absolute


# --- concise, for editors -----------------------------------------------------------------------

CONCISE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<code>DDP\d{3})(?: \[\*\])? (?P<message>.+)$")


def test_concise_lines_are_path_line_col_code_message(project):
    r = lint(project, "--output-format", "concise", "bad.py", "broken.py")
    assert r.returncode == 1
    finding_lines = [line for line in r.stdout.splitlines() if CONCISE.match(line)]
    parsed = [CONCISE.match(line).group("path", "line", "col", "code") for line in finding_lines]
    assert parsed == [("bad.py", "5", "16", "DDP001"), ("bad.py", "6", "16", "DDP001"), ("broken.py", "1", "11", "DDP900")]
    # Everything else is the summary, which no matcher should mistake for a finding.
    rest = [line for line in r.stdout.splitlines() if line not in finding_lines]
    assert rest[0] == "Found 3 findings:"


def vscode_problem_matcher() -> dict:
    """The problem matcher docs/integrations.md documents (its tasks.json block)."""
    readme = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- vscode-task -->\s*```json\n(.*?)```", readme, re.S)
    assert block, "docs/integrations.md lost its VS Code task block"
    task = json.loads(block.group(1))["tasks"][0]
    return task["problemMatcher"]


def test_documented_vscode_problem_matcher_parses_concise_output(project):
    matcher = vscode_problem_matcher()
    pattern = matcher["pattern"]
    regexp = re.compile(pattern["regexp"])
    r = lint(project, "--output-format", "concise", "bad.py")
    m = regexp.match(r.stdout.splitlines()[0])
    assert m, r.stdout
    groups = {key: m.group(pattern[key]) for key in ("file", "line", "column", "code", "message")}
    assert groups["file"] == "bad.py" and groups["line"] == "5" and groups["column"] == "16"
    assert groups["code"] == "DDP001" and groups["message"].startswith("DataLoader has no DistributedSampler")
    assert not any(regexp.match(line) for line in r.stdout.splitlines()[2:])  # the summary is not a finding


def test_runtime_findings_without_a_file_render_as_valid_sarif_and_junit():
    # `ddpcheck run` reports findings that name ranks instead of a source location.
    from ddpcheck.findings import Finding, Severity
    from ddpcheck.report import render

    found = [Finding(code="DDP001", name="missing-distributed-sampler", message="ranks 0 and 1 read the same samples",
                     severity=Severity.ERROR, ranks=(0, 1))]
    doc = json.loads(render("sarif", found, tool="run"))
    assert_valid_sarif(doc)
    (result,) = doc["runs"][0]["results"]
    assert "locations" not in result and result["properties"] == {"ranks": [0, 1]}
    assert doc["runs"][0]["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "DDP001"
    root = ET.fromstring(render("junit", found, tool="run"))
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "ddpcheck run"
    assert suite.find("testcase/failure").text == "<run>: DDP001 ranks 0 and 1 read the same samples\nranks: 0, 1"


def test_a_helper_finding_names_the_calls_that_lead_there():
    """The every-rank checkpoint is reported on the helper's torch.save line, with the call in
    the script as a related location (JSON `related`, SARIF `relatedLocations`)."""
    project = ROOT / "fixtures" / "corpus" / "constructs" / "c12_where_the_fix_goes"
    out = run_lint("--no-cache", "--output-format", "json", "train.py", cwd=project, env=cli_env())
    findings = json.loads(out.stdout)["findings"]
    save = next(f for f in findings if f["code"] == "DDP010")
    assert (save["path"], save["location"]["line"]) == ("checkpoint.py", 8)
    assert [(r["path"], r["location"]["line"]) for r in save["related"]] == [("train.py", 26), ("train.py", 21)]
    sarif = json.loads(run_lint("--no-cache", "--output-format", "sarif", "train.py",
                               cwd=project, env=cli_env()).stdout)
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "DDP010")
    related = result["relatedLocations"]
    assert [loc["physicalLocation"]["region"]["startLine"] for loc in related] == [26, 21]
