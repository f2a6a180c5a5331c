"""Accuracy on realistic scripts: the findings over fixtures/corpus/ are exactly its markers.

Markers (`# expect:` / `# miss:` / `# fp:`, see fixtures/corpus/README.md) are written by hand
from what each script does, not from ddpcheck's output. When a rule is added or changed, run
`python -m ddpcheck.tools.corpus_stats --diff` and review each line it prints.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ddpcheck.tools.corpus_stats import CorpusResult, diff, evaluate, markers, report
from tests.conftest import ROOT, cli_env

MINIMUM_PRECISION = 0.9
MINIMUM_RECALL = 0.85


def test_corpus_findings_are_exactly_the_markers():
    result = evaluate()
    print("\n" + report(result))  # shown with `pytest -s`; the README quotes these figures
    assert result.files >= 12
    assert not result.unexpected and not result.unfound, "\n" + diff(result)


def test_corpus_precision_and_recall():
    tp, fp, fn, precision, recall = evaluate().figures()
    assert tp >= 20
    assert precision >= MINIMUM_PRECISION, (tp, fp)
    assert recall >= MINIMUM_RECALL, (tp, fn)


def test_markers_parse_several_codes_and_kinds():
    text = textwrap.dedent("""\
        a = 1  # expect: DDP013, DDP020
        b = 2  # miss: DDP018 (why)  # fp: DDP001 (why)
        c = 3  # a comment naming DDP013 without a marker
    """)
    assert markers(text) == {
        "expect": {(1, "DDP013"), (1, "DDP020")},
        "miss": {(2, "DDP018")},
        "fp": {(2, "DDP001")},
    }


def test_figures_count_markers_not_findings():
    r = CorpusResult(expect={("a", 1, "DDP013"), ("a", 2, "DDP013")}, fp={("a", 3, "DDP013")},
                     miss={("b", 1, "DDP013")})
    tp, fp, fn, precision, recall = r.figures("DDP013")
    assert (tp, fp, fn) == (2, 1, 1)
    assert round(precision, 3) == 0.667 and round(recall, 3) == 0.667


def test_corpus_stats_command_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "ddpcheck.tools.corpus_stats"], cwd=ROOT, env=cli_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "precision" in out.stdout and "\nall " in out.stdout
    missing = subprocess.run([sys.executable, "-m", "ddpcheck.tools.corpus_stats", str(ROOT / "no-such-dir")],
                             cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
