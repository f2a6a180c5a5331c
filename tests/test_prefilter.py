"""The text pre-filter: files that cannot be relevant are skipped unparsed; nothing relevant is."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpcheck.catalog import all_rules
from ddpcheck.lint.prefilter import ImportScan
from tests.helpers import run_lint


def scan_of(root: Path) -> ImportScan:
    return ImportScan(lambda p: p.read_text() if p.is_file() else None)


@pytest.mark.parametrize("code", [c for c, i in all_rules().items() if i.kind == "lint" and i.bad])
def test_every_rules_bad_example_passes_the_filter(code, tmp_path):
    # A rule whose example the filter would skip could never report anything.
    p = tmp_path / "example.py"
    source = all_rules()[code].bad + "\n"
    p.write_text(source)
    assert scan_of(tmp_path).relevant(p, source)


def test_torch_reachable_through_project_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .launch import start\n")
    (tmp_path / "pkg" / "launch.py").write_text("import torch.distributed as dist\n")
    (tmp_path / "main.py").write_text("from pkg import start\nstart()\n")
    (tmp_path / "rel" / "sub").mkdir(parents=True)
    (tmp_path / "rel" / "helper.py").write_text("import torch\n")
    (tmp_path / "rel" / "sub" / "job.py").write_text("from ..helper import x\n")
    (tmp_path / "multi.py").write_text("from pkg import (\n    start,\n    other,\n)\n")
    (tmp_path / "plain.py").write_text("import os, json\nfrom collections import deque\nimport pkgutil\n")
    scan = scan_of(tmp_path)
    for name, expected in [("main.py", True), ("rel/sub/job.py", True), ("multi.py", True), ("plain.py", False)]:
        p = tmp_path / name
        assert scan.relevant(p, p.read_text()) is expected, name
    deps = scan.dependencies(tmp_path / "main.py")
    assert [d.name for d in deps] == ["__init__.py", "launch.py"]


def test_syntax_errors_are_still_reported_in_files_the_filter_skips(tmp_path):
    # Skipped files get no libcst parse, but CPython's parser still checks them.
    (tmp_path / "notes.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "uses_helper.py").write_text("from helper import setup\ndef broken(:\n")
    (tmp_path / "helper.py").write_text("import torch\n\ndef setup():\n    pass\n")
    (tmp_path / "fine.py").write_text("import os\nprint(os.sep)\n")
    r = run_lint("--no-cache", "--output-format", "concise", str(tmp_path))
    assert r.returncode == 1, r.stderr
    reported = sorted(line.split(":")[0].rsplit("/", 1)[-1] for line in r.stdout.splitlines() if ": DDP900 " in line)
    assert reported == ["notes.py", "uses_helper.py"]
    r = run_lint("--no-cache", "--ignore", "DDP900", str(tmp_path / "notes.py"))
    assert r.returncode == 0, r.stdout
