"""The lint cache through the real CLI: hits, what invalidates an entry, --no-cache, damage, races.

A hit is made visible by editing a stored entry's message: only a run that reads the entry
(instead of linting the file again) can print the edited text.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, run_cli

TRAIN = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from helpers import make_dataset

    dist.init_process_group("gloo")
    loader = DataLoader(make_dataset(), batch_size=64, shuffle=True)
    """
)
HELPERS = "import torch\n\n\ndef make_dataset():\n    return torch.arange(10)\n"
MARK = "EDITED-IN-CACHE"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "helpers.py").write_text(HELPERS)
    return tmp_path


def lint(project: Path, *args: str, env=None):
    return run_cli("lint", "--output-format", "json", *args, ".", cwd=project, env=env)


def entries(project: Path) -> list[Path]:
    return sorted((project / ".ddpcheck_cache").glob("lint-*/[0-9a-f]*.json"))


def tamper(project: Path) -> int:
    """Rewrite the message of every cached finding; return how many were changed."""
    changed = 0
    for entry in entries(project):
        items = json.loads(entry.read_text())
        for item in items:
            item["message"] = MARK
            changed += 1
        entry.write_text(json.dumps(items))
    return changed


def messages(result) -> list[str]:
    return [f["message"] for f in json.loads(result.stdout)["findings"]]


def test_second_run_reads_the_cache_and_reports_the_same(project):
    first = lint(project)
    assert first.returncode == 1, first.stderr
    assert len(entries(project)) == 2  # train.py and helpers.py (no finding, still cached)
    assert (project / ".ddpcheck_cache" / "CACHEDIR.TAG").is_file()
    assert (project / ".ddpcheck_cache" / ".gitignore").read_text().strip().endswith("*")
    again = lint(project)
    assert again.stdout == first.stdout
    assert tamper(project) == len(messages(first)) >= 1
    assert set(messages(lint(project))) == {MARK}


def test_cache_lives_beside_the_nearest_pyproject(project):
    sub = project / "pkg"
    sub.mkdir()
    (sub / "train.py").write_text(TRAIN)
    (sub / "helpers.py").write_text(HELPERS)
    assert lint(sub).returncode == 1
    assert not (sub / ".ddpcheck_cache").exists()
    assert entries(project)


def test_editing_the_file_invalidates_its_entry(project):
    lint(project)
    tamper(project)
    (project / "train.py").write_text(TRAIN + "\n# touched\n")
    assert MARK not in messages(lint(project))


def test_editing_an_imported_helper_invalidates_the_importer(project):
    lint(project)
    tamper(project)
    (project / "helpers.py").write_text(HELPERS + "\n\ndef other():\n    return 1\n")
    assert MARK not in messages(lint(project))


def test_other_settings_do_not_share_entries(project):
    lint(project)
    tamper(project)
    r = lint(project, "--ignore", "DDP900")  # another rule set, same findings
    assert MARK not in messages(r)
    assert set(messages(lint(project))) == {MARK}  # the first settings' entry is still there
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.ddpcheck]\nignore = ['DDP']\n")
    assert messages(lint(project)) == []


def test_another_version_does_not_read_this_versions_entries(project, tmp_path_factory):
    lint(project)
    tamper(project)
    other = tmp_path_factory.mktemp("other-version")
    shutil.copytree(ROOT / "ddpcheck", other / "ddpcheck", ignore=shutil.ignore_patterns("__pycache__"))
    init = other / "ddpcheck" / "__init__.py"
    text = init.read_text()
    assert "__version__ = " in text
    init.write_text(text.replace("__version__ = ", "__version__ = '999.0' or ", 1))
    env = cli_env()
    env["PYTHONPATH"] = str(other)
    r = lint(project, env=env)
    assert r.returncode == 1, r.stderr
    assert MARK not in messages(r)


def test_a_changed_rule_at_the_same_version_does_not_read_old_entries(project, tmp_path_factory):
    # A checkout where a rule was edited keeps the version number; its findings may differ.
    lint(project)
    tamper(project)
    other = tmp_path_factory.mktemp("edited-rule")
    shutil.copytree(ROOT / "ddpcheck", other / "ddpcheck", ignore=shutil.ignore_patterns("__pycache__"))
    env = cli_env()
    env["PYTHONPATH"] = str(other)
    assert set(messages(lint(project, env=env))) == {MARK}  # an unchanged copy reads the same entries
    rule = next((other / "ddpcheck" / "lint" / "rules").glob("*.py"))
    rule.write_text(rule.read_text() + "\n# edited\n")
    r = lint(project, env=env)
    assert r.returncode == 1, r.stderr
    assert MARK not in messages(r)


def test_no_cache_neither_reads_nor_writes(project):
    r = lint(project, "--no-cache")
    assert r.returncode == 1
    assert not (project / ".ddpcheck_cache").exists()
    lint(project)
    tamper(project)
    assert MARK not in messages(lint(project, "--no-cache"))


def test_corrupt_entries_are_misses_and_get_rewritten(project):
    expected = lint(project, "--no-cache").stdout
    lint(project)
    for i, entry in enumerate(entries(project)):
        entry.write_bytes([b"", b"{not json", b'[{"code": 1}]'][i % 3])
    r = lint(project)
    assert r.returncode == 1, r.stderr
    assert r.stdout == expected
    assert all(json.loads(e.read_text()) is not None for e in entries(project))
    assert lint(project).stdout == expected


def test_unwritable_cache_is_skipped_silently(project):
    (project / ".ddpcheck_cache").write_text("a file where the directory should be")
    r = lint(project)
    assert r.returncode == 1
    assert r.stderr == ""


@pytest.mark.slow
def test_concurrent_runs_agree_and_leave_a_valid_cache(project):
    sys.path.insert(0, str(ROOT / "bench"))
    from corpus import ddp_script

    # Four processes racing over the same dozen scripts write every cache entry at about the same
    # time; more scripts only lengthened each lint (30 had made this the slowest lint test).
    for i in range(12):
        (project / f"script_{i:02d}.py").write_text(ddp_script(i))
    expected = lint(project, "--no-cache").stdout
    procs = [
        subprocess.Popen([sys.executable, "-m", "ddpcheck", "lint", "--output-format", "json", "."],
                         cwd=project, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for out, err in outputs:
        assert err == ""
        assert out == expected
    assert len(entries(project)) == 12 + 2  # and train.py, helpers.py
    assert not list((project / ".ddpcheck_cache").rglob("*.tmp"))
    assert lint(project).stdout == expected
