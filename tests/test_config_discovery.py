"""Config discovery in a monorepo, the way Ruff users expect: the nearest pyproject.toml with a
[tool.ddpcheck] table applies to the files below it, wherever lint is run from; `--config`
overrides discovery; `ddpcheck config FILE` and `lint --show-settings` say what applies."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import run_lint

BAD = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    loader = DataLoader(dataset, batch_size=64)
    dist.destroy_process_group()
    """
)
FINDING = re.compile(r"^(?P<path>[^:\n]+):\d+:\d+: (?P<code>DDP\d{3}) ", re.M)

LAYOUT = {
    # The monorepo's own policy: DDP001 off (say, its tools are single-process).
    "pyproject.toml": '[tool.ddpcheck]\nignore = ["DDP001"]\n',
    "tools/train.py": BAD,
    # A sub-project with its own table: the root's ignore does not reach it.
    "services/a/pyproject.toml": '[tool.ddpcheck]\nselect = ["DDP0"]\n',
    "services/a/train.py": BAD,
    # A pyproject without [tool.ddpcheck] is passed over: the root's table applies.
    "services/b/pyproject.toml": '[project]\nname = "b"\nversion = "0"\n',
    "services/b/train.py": BAD,
    # Patterns are relative to the pyproject that holds them.
    "services/c/pyproject.toml": textwrap.dedent(
        """\
        [tool.ddpcheck]
        extend-exclude = ["generated"]

        [tool.ddpcheck.per-file-ignores]
        "scripts/*" = ["DDP001"]
        """
    ),
    "services/c/train.py": BAD,
    "services/c/scripts/launch.py": BAD,
    "services/c/generated/model_pb.py": BAD,
}


@pytest.fixture
def mono(tmp_path: Path) -> Path:
    for rel, text in LAYOUT.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def reported(stdout: str, base: Path | None = None) -> set[str]:
    paths = {m.group("path") for m in FINDING.finditer(stdout)}
    if base is not None:
        paths = {Path(p).resolve().relative_to(base.resolve()).as_posix() for p in paths}
    return paths


def test_nearest_table_applies_per_sub_project(mono):
    r = run_lint("--output-format", "concise", ".", cwd=mono)
    assert r.returncode == 1, r.stderr
    assert reported(r.stdout) == {"services/a/train.py", "services/c/train.py"}


def test_discovery_follows_the_file_not_the_cwd(mono, tmp_path_factory):
    # From inside sub-project a, naming files of c and of the root.
    r = run_lint("--output-format", "concise", "../c/train.py", "../c/scripts/launch.py",
                "../../tools/train.py", cwd=mono / "services" / "a")
    assert reported(r.stdout) == {"../c/train.py"}
    # From a directory outside the repository, with an absolute path.
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    r = run_lint("--output-format", "concise", str(mono), cwd=elsewhere)
    assert reported(r.stdout, mono) == {"services/a/train.py", "services/c/train.py"}


def test_excluded_file_named_explicitly_needs_force_exclude(mono):
    named = "services/c/generated/model_pb.py"
    assert reported(run_lint("--output-format", "concise", named, cwd=mono).stdout) == {named}
    forced = run_lint("--output-format", "concise", "--force-exclude", named, cwd=mono)
    assert forced.returncode == 0 and reported(forced.stdout) == set()


def test_config_option_overrides_discovery_for_every_file(mono, tmp_path_factory):
    r = run_lint("--output-format", "concise", "--config", "services/a/pyproject.toml", ".", cwd=mono)
    # a's table everywhere: DDP001 on for all, c's excludes and per-file-ignores no longer apply.
    assert reported(r.stdout) == {
        "tools/train.py", "services/a/train.py", "services/b/train.py", "services/c/train.py",
        "services/c/scripts/launch.py", "services/c/generated/model_pb.py"}
    # A plain TOML file (keys at the top level) works too.
    plain = tmp_path_factory.mktemp("cfg") / "ddpcheck.toml"
    plain.write_text('ignore = ["DDP0"]\n')
    quiet = run_lint("--config", str(plain), ".", cwd=mono)
    assert quiet.returncode == 0 and "All checks passed!" in quiet.stdout


def test_command_line_selection_goes_on_top_of_the_nearest_table(mono):
    # --select replaces the configured set (the root's ignore of DDP001 is undone, as in Ruff)...
    r = run_lint("--output-format", "concise", "--select", "DDP001", "tools", "services/b", cwd=mono)
    assert reported(r.stdout) == {"tools/train.py", "services/b/train.py"}
    # ... while --ignore adds to it.
    assert run_lint("--ignore", "DDP001", ".", cwd=mono).returncode == 0


def test_stdin_filename_picks_the_config(mono):
    inside_c = run_lint("--output-format", "concise", "-", "--stdin-filename", "services/c/scripts/new.py",
                       input=BAD, cwd=mono)
    assert inside_c.returncode == 0, inside_c.stdout
    inside_a = run_lint("--output-format", "concise", "-", "--stdin-filename", "services/a/new.py",
                       input=BAD, cwd=mono)
    assert inside_a.returncode == 1 and reported(inside_a.stdout) == {"services/a/new.py"}


def settings(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition(": ")
        assert sep, f"not a `key: value` line: {line!r}"
        key = key.strip()
        if key.startswith("enabled rules ("):
            count = int(key[len("enabled rules ("):-1])
            assert count == len(value.split(", ")), line
            key = "enabled rules"
        out[key] = value.strip()
    return out


def test_config_command_prints_what_applies_to_a_file(mono):
    r = run_cli("config", "services/c/scripts/launch.py", cwd=mono)
    assert r.returncode == 0, r.stderr
    s = settings(r.stdout)
    assert s["file"] == "services/c/scripts/launch.py"
    assert s["config"] == f"{(mono / 'services/c/pyproject.toml').resolve()} [tool.ddpcheck]"
    assert s["root"] == str((mono / "services/c").resolve())
    assert s["per-file-ignores"] == "scripts/* = DDP001"
    assert s["ignored for this file"] == "DDP001"
    assert s["extend-exclude"] == "generated"
    assert s["excluded"] == "no"
    enabled = s["enabled rules"].split(", ")
    assert "DDP001" not in enabled and "DDP900" in enabled and "DDP005" in enabled

    b = settings(run_cli("config", "services/b/train.py", cwd=mono).stdout)
    assert b["config"] == f"{(mono / 'pyproject.toml').resolve()} [tool.ddpcheck]"
    assert b["from config"] == "ignore DDP001"

    generated = settings(run_cli("config", "services/c/generated/model_pb.py", cwd=mono).stdout)
    assert generated["excluded"] == "yes"


def test_config_command_without_any_table_shows_defaults(tmp_path):
    (tmp_path / "train.py").write_text(BAD)
    s = settings(run_cli("config", "train.py", cwd=tmp_path).stdout)
    assert s["config"] == "(none found: defaults)"
    assert s["exclude"].endswith("(default)") and ".venv" in s["exclude"]
    assert {"DDP001", "DDP900"} <= set(s["enabled rules"].split(", "))


def test_show_settings_includes_the_command_line_layer(mono):
    r = run_lint("--show-settings", "--select", "DDP0", "--ignore", "DDP900", "services/b/train.py", cwd=mono)
    assert r.returncode == 0, r.stderr
    s = settings(r.stdout)
    assert s["from config"] == "ignore DDP001"
    assert s["from command line"] == "select DDP0; ignore DDP900"
    # The command line's select comes last and wins over the config's ignore of DDP001.
    enabled = s["enabled rules"].split(", ")
    assert "DDP001" in enabled and "DDP900" not in enabled and all(c.startswith("DDP0") for c in enabled)


def test_show_settings_with_config_option(mono):
    s = settings(run_lint("--show-settings", "--config", "services/a/pyproject.toml", "tools/train.py", cwd=mono).stdout)
    assert s["config"].startswith(str(Path("services/a/pyproject.toml")))
    assert s["from config"] == "select DDP0"


def test_extend_stacks_a_shared_config_under_a_project_one(tmp_path):
    shared = tmp_path / "configs" / "ddpcheck.toml"
    shared.parent.mkdir()
    shared.write_text('ignore = ["DDP005"]\nextend-exclude = ["gen/*"]\n')
    project = tmp_path / "proj"
    (project / "gen").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[tool.ddpcheck]\nextend = "../configs/ddpcheck.toml"\nextend-select = ["DDP901"]\n')
    (project / "train.py").write_text(BAD)
    (project / "gen" / "x.py").write_text(BAD)
    r = run_lint("--output-format", "concise", ".", cwd=project)
    # The shared ignore applies; its `gen/*` is relative to configs/, so proj/gen is linted.
    assert sorted(m.group("path", "code") for m in FINDING.finditer(r.stdout)) == [
        ("gen/x.py", "DDP001"), ("train.py", "DDP001")]
    shown = run_cli("config", "train.py", cwd=project).stdout
    assert f"extends {shared}" in shown
    assert f"from {shared}: ignore DDP005" in shown


def test_extend_relative_to_the_file_that_names_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpcheck]\nignore = ["DDP001"]\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    (sub / "pyproject.toml").write_text('[tool.ddpcheck]\nextend = "../../pyproject.toml"\n')
    (sub / "train.py").write_text(BAD)
    assert run_lint("train.py", cwd=sub).returncode == 0
    assert run_lint("a/b/train.py", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("files,expected", [
    ({"pyproject.toml": '[tool.ddpcheck]\nextend = "missing.toml"\n'},
     '[tool.ddpcheck]: `extend = "missing.toml"`: no such file'),
    ({"pyproject.toml": '[tool.ddpcheck]\nextend = "other.toml"\n', "other.toml": 'extend = "pyproject.toml"\n'},
     "`extend` makes a cycle"),
    ({"pyproject.toml": '[tool.ddpcheck]\nextend = "pyproject.toml"\n'}, "`extend` makes a cycle"),
    ({"pyproject.toml": "[tool.ddpcheck]\nextend = 3\n"}, "`extend` must be a path to a TOML file"),
    ({"pyproject.toml": '[tool.ddpcheck]\nextend = "base/pyproject.toml"\n',
      "base/pyproject.toml": '[project]\nname = "x"\n'}, "no [tool.ddpcheck] table"),
])
def test_bad_extend_is_one_error_line_exit_2(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "train.py").write_text(BAD)
    r = run_lint("train.py", cwd=tmp_path)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("ddpcheck: error: ") and expected in line, line
