"""bench/realworld/eval.py: its scoring rules, and export + lint + score on a git repository made here."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT, cli_env

EVAL = ROOT / "bench" / "realworld" / "eval.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("realworld_eval", EVAL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ev = _load()


def _labels(**codes: dict[str, Any]) -> dict[str, Any]:
    labels = {c: {"status": "N/A", "reason": "not part of this test"} for c in ev.CODES}
    labels.update(codes)
    return labels


def _raw_entry(labels: dict[str, Any], commit: str = "a" * 40) -> dict[str, Any]:
    return {"repo": "someone/proj", "commit": commit, "path": "train.py", "helpers": ["util/dist.py"],
            "kind": "personal", "prefix_fix": None, "labels": labels}


def _verdicts(outcomes: list[Any]) -> list[tuple[str, str, str, int]]:
    return sorted((o.verdict, o.code, o.path, o.line) for o in outcomes)


def test_scoring_follows_the_documented_rules() -> None:
    labels = _labels(
        DDP010={"status": "PRESENT", "reason": "every rank saves",
                "lines": [{"path": "util/dist.py", "line": 40, "also": [{"path": "train.py", "line": 90}]},
                          {"path": "train.py", "line": 120}]},
        DDP002={"status": "PRESENT", "reason": "no set_epoch", "lines": [{"path": "train.py", "line": 50}]},
        DDP011={"status": "ABSENT", "reason": "map_location given"},
        DDP003={"status": "PRESENT", "reason": "no set_device", "lines": [{"path": "train.py", "line": 10}]},
    )
    entry = ev._entry(_raw_entry(labels), "t[0]")
    findings = [
        ev.Finding("DDP010", "train.py", 92),       # within 2 lines of an `also` location
        ev.Finding("DDP010", "train.py", 200),      # a second finding: the other instance, not located
        ev.Finding("DDP002", "train.py", 53),       # 3 lines away: TP, not located
        ev.Finding("DDP011", "train.py", 70),       # ABSENT: false positive
        ev.Finding("DDP011", "util/dist.py", 5),    # helper line no label names: listed only
        ev.Finding("DDP004", "train.py", 30),       # N/A: ignored
        ev.Finding("DDP015", "train.py", 31),       # N/A: ignored
    ]
    got = _verdicts(ev.score_entry(entry, findings))
    assert got == sorted([
        ("TP", "DDP010", "train.py", 92),
        ("TP-unlocated", "DDP010", "train.py", 200),
        ("TP-unlocated", "DDP002", "train.py", 53),
        ("FP", "DDP011", "train.py", 70),
        ("helper-unscored", "DDP011", "util/dist.py", 5),
        ("ignored", "DDP004", "train.py", 30),
        ("ignored", "DDP015", "train.py", 31),
        ("FN", "DDP003", "train.py", 10),
    ])
    table = ev.tally([ev.ScriptResult(entry, ev.score_entry(entry, findings))], ev.CODES)
    assert (table["DDP010"].tp, table["DDP010"].located, table["DDP010"].fp, table["DDP010"].fn) == (2, 1, 0, 0)
    assert table["DDP011"].as_dict()["precision"] == 0.0
    assert table["DDP003"].as_dict()["recall"] == 0.0


def test_nearest_finding_wins_and_extra_findings_are_false_positives() -> None:
    labels = _labels(DDP001={"status": "PRESENT", "reason": "no sampler",
                             "lines": [{"path": "train.py", "line": 20}]})
    entry = ev._entry(_raw_entry(labels), "t[0]")
    findings = [ev.Finding("DDP001", "train.py", 18), ev.Finding("DDP001", "train.py", 21)]
    assert _verdicts(ev.score_entry(entry, findings)) == [
        ("FP", "DDP001", "train.py", 18), ("TP", "DDP001", "train.py", 21)]


@pytest.mark.parametrize("change, message", [
    ({"commit": "abc"}, "commit must be 40"),
    ({"labels": {"DDP001": {"status": "PRESENT", "reason": "x", "lines": []}}}, "exactly when"),
    ({"labels": {"DDP001": {"status": "ABSENT", "reason": "x",
                            "lines": [{"path": "elsewhere.py", "line": 3}]}}}, "neither the script"),
    ({"labels": {"DDP999": {"status": "ABSENT", "reason": "x"}}}, "unknown code"),
    ({"labels": {"DDP001": {"status": "MAYBE", "reason": "x"}}}, "status must be"),
    ({"helpers": ["util/dist.py", "scripts/launch.sh"]}, "helpers must be Python modules, not scripts/launch.sh"),
])
def test_labels_that_break_the_schema_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    raw = _raw_entry(_labels())
    raw.update(change)
    (tmp_path / "labels.json").write_text(json.dumps([raw]))
    done = subprocess.run([sys.executable, str(EVAL), "unused.json", "--labels", str(tmp_path / "labels.json")],
                          capture_output=True, text=True, env=cli_env(), timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


TRAIN = '''\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def main():
    dist.init_process_group("gloo")
    data = list(range(64))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=4, shuffle=True, sampler=sampler)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader:
            pass
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def _evaluate(tmp_path: Path, labels: list[dict[str, Any]], repo: Path) -> subprocess.CompletedProcess[str]:
    """`eval.py --json` over `labels`, with someone/proj's mirror at `repo`."""
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    (tmp_path / "mirrors.json").write_text(json.dumps({"someone/proj": str(repo / ".git")}))
    return subprocess.run([sys.executable, str(EVAL), str(tmp_path / "mirrors.json"),
                           "--labels", str(tmp_path / "labels.json"), "--json"],
                          capture_output=True, text=True, env=cli_env(), timeout=300)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**cli_env(), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_exports_the_labelled_commit_lints_and_scores(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "train.py").write_text(TRAIN)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "README.md").write_text("not exported\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "buggy")
    buggy = _git(repo, "rev-parse", "HEAD")
    (repo / "train.py").write_text(TRAIN.replace(" shuffle=True,", ""))
    _git(repo, "commit", "-qam", "fix")  # the newest commit is clean: only the labelled one has the bug

    line = TRAIN.splitlines().index(next(t for t in TRAIN.splitlines() if "shuffle=True" in t)) + 1
    labels = [
        {"repo": "someone/proj", "commit": buggy, "path": "train.py", "helpers": [], "kind": "personal",
         "prefix_fix": None, "labels": _labels(DDP006={"status": "PRESENT", "reason": "shuffle with sampler",
                                                         "lines": [{"path": "train.py", "line": line}]})},
        {"repo": "someone/absent", "commit": "b" * 40, "path": "train.py", "helpers": [], "kind": "personal",
         "prefix_fix": None, "labels": _labels()},
    ]
    done = _evaluate(tmp_path, labels, repo)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["scripts"] == 1 and report["skipped"] == ["someone/absent"]
    assert "someone/absent" in done.stderr
    ddp006 = report["codes"]["DDP006"]
    assert (ddp006["tp"], ddp006["located"], ddp006["fp"], ddp006["fn"]) == (1, 1, 0, 0)
    assert report["per_script"][0]["error"] == ""

    text = subprocess.run([sys.executable, str(EVAL), str(tmp_path / "mirrors.json"),
                           "--labels", str(tmp_path / "labels.json"), "--code", "DDP006"],
                          capture_output=True, text=True, env=cli_env(), timeout=300)
    assert text.returncode == 0, text.stderr
    assert "1 scripts from 1 repositories" in text.stdout
    assert any(row.split()[:4] == ["DDP006", "1", "0", "0"] for row in text.stdout.splitlines())


def test_corpus_table_and_missing_mirrors_file(tmp_path: Path) -> None:
    raw = _raw_entry(_labels(DDP005={"status": "PRESENT", "reason": "never destroyed",
                                     "lines": [{"path": "train.py", "line": 3}]}))
    raw["prefix_fix"] = {"thread": "https://example.org/pull/1", "change": "destroys the group"}
    (tmp_path / "labels.json").write_text(json.dumps([raw]))
    labels = ["--labels", str(tmp_path / "labels.json")]
    table = subprocess.run([sys.executable, str(EVAL), "--corpus", *labels],
                           capture_output=True, text=True, env=cli_env(), timeout=60)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if "someone/proj" in line)
    assert "`train.py`" in row and "[thread](https://example.org/pull/1)" in row and row.endswith("| DDP005 |")
    missing = subprocess.run([sys.executable, str(EVAL), *labels],
                             capture_output=True, text=True, env=cli_env(), timeout=60)
    assert missing.returncode == 2 and "mirrors file is required" in missing.stderr


SEEDED = '''\
import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)


def main():
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    data = list(range(64))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=2)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader:
            noise = torch.randn(len(batch))  # training draws from torch's generator
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_newer_codes_are_scored_with_off_by_default_rules_and_kept_out_of_the_headline(tmp_path: Path) -> None:
    assert ev.CODES[-1] == "DDP036" and "DDP029" in ev.NEWER and "DDP022" not in ev.NEWER
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text(SEEDED)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "seeded")
    commit = _git(repo, "rev-parse", "HEAD")
    line = SEEDED.splitlines().index("    torch.manual_seed(args.seed)") + 1
    labels = [{"repo": "someone/proj", "commit": commit, "path": "train.py", "helpers": [], "kind": "personal",
               "prefix_fix": None,
               "labels": _labels(DDP029={"status": "PRESENT", "reason": "same seed on every rank",
                                         "lines": [{"path": "train.py", "line": line}]},
                                 DDP005={"status": "ABSENT", "reason": "destroyed at the end"})}]
    done = _evaluate(tmp_path, labels, repo)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    ddp029 = report["codes"]["DDP029"]
    assert (ddp029["tp"], ddp029["fp"], ddp029["fn"]) == (1, 0, 0)  # DDP029 is off by default
    assert (report["newer"]["tp"], report["newer"]["fp"], report["newer"]["fn"]) == (1, 0, 0)
    assert report["headline"]["tp"] == 0 and report["newer_codes"][0] == "DDP023"


def test_a_finding_at_another_labelled_location_of_a_found_instance_is_a_duplicate() -> None:
    # One instance, labelled at the load and at two other loads beside it (`also`).
    labels = _labels(DDP011={"status": "PRESENT", "reason": "every rank loads without map_location",
                             "lines": [{"path": "train.py", "line": 40,
                                        "also": [{"path": "train.py", "line": 34},
                                                 {"path": "train.py", "line": 37}]}]})
    entry = ev._entry(_raw_entry(labels), "t[0]")
    findings = [ev.Finding("DDP011", "train.py", n) for n in (34, 37, 40, 60)]
    assert _verdicts(ev.score_entry(entry, findings)) == [
        ("FP", "DDP011", "train.py", 60),  # no location of the instance: a false claim
        ("TP", "DDP011", "train.py", 34),
        ("duplicate", "DDP011", "train.py", 37),
        ("duplicate", "DDP011", "train.py", 40),
    ]
    table = ev.tally([ev.ScriptResult(entry, ev.score_entry(entry, findings))], ev.CODES)
    assert (table["DDP011"].tp, table["DDP011"].fp, table["DDP011"].fn) == (1, 1, 0)


def test_a_file_ddpcheck_could_not_check_is_an_error_not_a_clean_script(tmp_path: Path) -> None:
    # Without the error line, every label of the script would silently count as a miss.
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text(TRAIN)
    (repo / "helper.py").write_bytes(b'NAME = "\xff\xfe"\n')  # not UTF-8: ddpcheck cannot read it
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    commit = _git(repo, "rev-parse", "HEAD")
    labels = [{"repo": "someone/proj", "commit": commit, "path": "train.py", "helpers": ["helper.py"],
               "kind": "personal", "prefix_fix": None, "labels": _labels()}]
    done = _evaluate(tmp_path, labels, repo)
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout)["per_script"][0]["error"]
    assert error.startswith("ddpcheck could not check helper.py: cannot read: not valid utf-8"), error
