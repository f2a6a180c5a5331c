"""Whole scripts and projects written in the styles real code uses (fixtures/lint/, fixtures/corpus/
and its construct projects): one `ddpcheck lint` run over all of them reports exactly the lines
their markers name — `# expect: CODE` (a real pitfall) and `# fp: CODE` (a known false positive)
— nothing else, wherever in a project the finding sits; `# miss: CODE` marks a real pitfall that
is not reported. A marker naming a code that does not exist fails. The markers are written by
hand from what the code does, never from ddpcheck's output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ddpcheck.catalog import all_rules
from tests.conftest import FIXTURES, ROOT

_spec = importlib.util.spec_from_file_location("corpus_stats", ROOT / "scripts" / "corpus_stats.py")
stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stats)  # the repository script that prints docs/accuracy.md's figures

DIRS = [FIXTURES / "lint", FIXTURES / "corpus"]
FILES = sorted(p for d in DIRS for p in d.rglob("*.py"))
MINIMUM_PRECISION = 0.95
MINIMUM_RECALL = 0.9


def _rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def run(request, tmp_path_factory) -> tuple[dict[str, set], set]:
    if not hasattr(request.config, "workerinput"):  # one pytest process, no xdist worker
        return stats.markers(FILES), stats.findings(DIRS)
    # Under pytest-xdist each worker that runs a test of this module sets the fixture up: the
    # first one lints the fixtures, the others wait for it and read its result (the lint of every
    # fixture, once per test run, not once per worker). The workers' temporary folders share a parent.
    import fcntl
    import pickle

    shared = tmp_path_factory.getbasetemp().parent
    data = shared / "fixture-findings.pickle"
    with open(shared / "fixture-findings.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not data.exists():
            made = data.with_suffix(".tmp")
            made.write_bytes(pickle.dumps((stats.markers(FILES), stats.findings(DIRS))))
            made.replace(data)
        result: tuple[dict[str, set], set] = pickle.loads(data.read_bytes())
    return result


def test_there_are_fixtures_of_every_kind():
    names = {p.name for p in FILES}
    assert {"tutorial_ddp.py", "good_ddp.py", "bad_vit_pretrain.py"} <= names
    assert len({p.parent for p in FILES if "constructs" in p.parts}) >= 13  # one project per construct


def test_markers_name_codes_that_exist(run):
    marked, _ = run
    known = set(all_rules())
    unknown = sorted(k for keys in marked.values() for k in keys if k[2] not in known)
    assert not unknown, f"markers name codes no rule has: {unknown}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: _rel(p).split("fixtures/", 1)[1])
def test_findings_are_exactly_the_markers(run, path):
    marked, found = run
    rel = _rel(path)
    want = {k for k in marked["expect"] | marked["fp"] if k[0] == rel}
    got = {k for k in found if k[0] == rel}
    assert got == want, f"missing {sorted(want - got)}, unexpected {sorted(got - want)}"
    assert not {k for k in marked["miss"] if k[0] == rel} & got, "a `# miss:` line is reported: mark it expect"


def test_clean_variants_of_the_constructs_report_nothing(run):
    _, found = run
    clean = {_rel(p) for p in FILES if p.name.endswith("_clean.py")}
    assert clean and not [k for k in found if k[0] in clean]


def test_precision_and_recall_on_the_corpus(run):
    marked, found = run
    corpus = _rel(FIXTURES / "corpus")
    real = {k for k in marked["expect"] | marked["miss"] if k[0].startswith(corpus)}
    tp, fp, fn, precision, recall = stats.figures({k for k in found if k[0].startswith(corpus)}, real)
    assert tp >= 60
    assert precision >= MINIMUM_PRECISION, (tp, fp)
    assert recall >= MINIMUM_RECALL, (tp, fn)


def test_the_docs_show_the_current_corpus_figures(run):
    marked, found = run
    corpus = _rel(FIXTURES / "corpus")
    files = [p for p in FILES if _rel(p).startswith(corpus)]
    real = {k for k in marked["expect"] | marked["miss"] if k[0].startswith(corpus)}
    table = stats.table(len(files), {k for k in found if k[0].startswith(corpus)}, real)
    assert table in (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8"), \
        f"docs/accuracy.md's corpus figures are stale: `python scripts/corpus_stats.py --readme` writes these:\n{table}"
