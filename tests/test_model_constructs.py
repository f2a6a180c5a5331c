"""The ways real training code is written that the semantic model follows (fixtures/corpus/
constructs/, one small project per way): each project's findings are exactly its `# expect:`
markers, wherever in the project they sit, and each `*_clean.py` script gets no finding at all."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.model import Project
from ddpcheck.lint.rules import rule_classes
from tests.conftest import ROOT, cli_env, run_cli

CONSTRUCTS = ROOT / "fixtures" / "corpus" / "constructs"
_EXPECT = re.compile(r"#\s*expect:\s*(DDP\d{3}(?:\s*,\s*DDP\d{3})*)")
RULES = rule_classes()


def _projects() -> list[Path]:
    return sorted(p for p in CONSTRUCTS.iterdir() if p.is_dir())


def _markers(project: Path) -> set[tuple[str, int, str]]:
    found = set()
    for path in project.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in _EXPECT.finditer(line):
                for code in re.split(r"\s*,\s*", match.group(1)):
                    found.add((path.relative_to(project).as_posix(), number, code))
    return found


def _findings(project: Path, root: Path, facts: Project) -> set[tuple[str, int, str]]:
    out = set()
    for f in lint_source(str(root.resolve()), root.read_text(), RULES, facts):
        out.add((Path(f.path).resolve().relative_to(project.resolve()).as_posix(), f.line, f.code))
    return out


def test_there_is_a_project_for_each_construct():
    assert len(_projects()) == 13


@pytest.mark.parametrize("project", _projects(), ids=lambda p: p.name)
def test_findings_are_exactly_the_markers(project: Path):
    facts = Project()
    found: set[tuple[str, int, str]] = set()
    for root in sorted(project.rglob("*.py")):
        if not root.name.endswith("_clean.py"):
            found |= _findings(project, root, facts)
    want = _markers(project)
    assert want, "a construct project marks at least one finding"
    assert found == want, f"missing {sorted(want - found)}, unexpected {sorted(found - want)}"


@pytest.mark.parametrize("root", sorted(CONSTRUCTS.rglob("*_clean.py")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_clean_variant_has_no_finding(root: Path):
    project = next(p for p in _projects() if p in root.parents)
    assert _findings(project, root, Project()) == set()


def test_a_helper_finding_names_the_calls_that_lead_there(tmp_path):
    """The every-rank checkpoint is reported on the helper's torch.save line, with the call in
    the script as a related location (JSON `related`, SARIF `relatedLocations`)."""
    project = CONSTRUCTS / "c12_where_the_fix_goes"
    out = run_cli("lint", "--no-cache", "--output-format", "json", "train.py", cwd=project, env=cli_env())
    findings = json.loads(out.stdout)["findings"]
    save = next(f for f in findings if f["code"] == "DDP010")
    assert (save["path"], save["location"]["line"]) == ("checkpoint.py", 8)
    assert [(r["path"], r["location"]["line"]) for r in save["related"]] == [("train.py", 26), ("train.py", 21)]
    sarif = json.loads(run_cli("lint", "--no-cache", "--output-format", "sarif", "train.py",
                               cwd=project, env=cli_env()).stdout)
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "DDP010")
    related = result["relatedLocations"]
    assert [loc["physicalLocation"]["region"]["startLine"] for loc in related] == [26, 21]
