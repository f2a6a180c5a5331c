"""What `lint` and `run` share: the code selection of `[tool.ddpcheck]` and the command line, one
name per code across both halves (each reachable by `ddpcheck explain NAME`), and one JSON
schema. Quick: no job is launched here (the slow tests validate real runs' reports)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from ddpcheck.catalog import all_rules, render_page
from ddpcheck.cli import main
from ddpcheck.errors import UserError
from ddpcheck.run.launcher.selection import selected_codes

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "ddpcheck" / "report" / "report.schema.json").read_text())
RUNTIME = {c for c, i in all_rules().items() if i.kind == "run"}


def _selected(script: Path, **kw: object) -> set[str]:
    args: dict = {"select": None, "extend_select": (), "ignore": (), "probes": None, "config": None}
    args.update(kw)
    return set(selected_codes(script=script, **args))


def test_run_selects_codes_and_prefixes_with_the_projects_table_then_the_command_line(tmp_path):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    script = project / "scripts" / "train.py"
    script.write_text("print('hi')\n")
    assert _selected(script) == RUNTIME  # no table anywhere: every runtime check
    assert _selected(script, select=("DDP10",)) == {c for c in RUNTIME if c.startswith("DDP10")}

    (project / "pyproject.toml").write_text('[tool.ddpcheck]\nignore = ["DDP11", "DDP122"]\n')
    from_table = _selected(script)
    assert "DDP112" not in from_table and "DDP122" not in from_table and "DDP105" in from_table
    # The command line comes after the table, as in Ruff: it can add back what the table ignores.
    assert "DDP112" in _selected(script, extend_select=("DDP112",))
    assert _selected(script, select=("ALL",), ignore=("DDP1",)) == set()
    # --checks PROBES is a --select of their codes.
    assert _selected(script, probes=("grads", "lifecycle")) == {
        "DDP105", "DDP108", "DDP109", "DDP110", "DDP111", "DDP112"}

    # One code space: a table that selects static rules only selects no runtime check.
    (project / "pyproject.toml").write_text('[tool.ddpcheck]\nselect = ["DDP0"]\n')
    assert _selected(script) == set()
    other = tmp_path / "other.toml"
    other.write_text('[tool.ddpcheck]\nselect = ["DDP105"]\n')
    assert _selected(script, config=other) == {"DDP105"}


@pytest.mark.parametrize(("kw", "says"), [
    ({"select": ("DDP777",)}, "--select: unknown rule code or prefix 'DDP777'"),
    ({"ignore": ("XYZ",)}, "--ignore: unknown rule code or prefix 'XYZ'"),
    ({"probes": ("grads", "bogus")}, "--checks: unknown check bogus"),
])
def test_unknown_codes_are_usage_errors(tmp_path, kw, says):
    with pytest.raises(UserError, match=re.escape(says)):
        _selected(tmp_path / "train.py", **kw)


def test_names_are_unique_across_lint_and_run_and_not_the_same_words_reordered():
    infos = list(all_rules().values())
    names = [i.name for i in infos]
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    as_words = {}
    for info in infos:
        words = tuple(sorted(info.name.replace("hard-coded", "hardcoded").split("-")))
        assert words not in as_words, f"{info.code} {info.name} and {as_words[words]}: the same words"
        as_words[words] = f"{info.code} {info.name}"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`ddpcheck ARGV` in this process (the console script's own entry point)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


def test_explain_reaches_every_code_by_its_name(capsys):
    for code, info in all_rules().items():
        status, out = _cli(capsys, "explain", info.name)
        assert status == 0 and out == render_page(info), code


def test_lint_json_follows_the_shared_schema(capsys):
    bad = ROOT / "fixtures" / "lint" / "bad_hf_style.py"  # findings with fixes and end locations
    status, out = _cli(capsys, "lint", "--no-cache", "--output-format", "json", str(bad))
    document = json.loads(out)
    assert status == 1 and document["findings"]
    jsonschema.validate(document, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):  # a lint document never carries run's extras
        jsonschema.validate({**document, "run": {"job": {}, "checks": [], "ranks": []}}, SCHEMA)
