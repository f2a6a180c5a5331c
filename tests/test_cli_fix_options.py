"""`--fix`, `--diff`, `--fix-only`, `--show-fixes`, `--exit-non-zero-on-fix` through the real
entry point: what is written, what is printed where, and the exit codes Ruff users expect."""

from __future__ import annotations

import textwrap

from tests.helpers import run_lint

# One safe fix (the unused noqa on line 6, with DDP901 on) and one unsafe fix (DDP006 on line 5:
# the sampler keeps its order, so dropping `shuffle=True` changes what the user asked for).
SOURCE = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    loader = DataLoader(ds, shuffle=True, sampler=DistributedSampler(ds, shuffle=False))
    print("ready")  # noqa: DDP011
    dist.destroy_process_group()
    """
)
NO_NOQA = SOURCE.replace("  # noqa: DDP011", "")
NO_SHUFFLE = SOURCE.replace("shuffle=True, ", "")
SELECT = ("--extend-select", "DDP901")


def _file(tmp_path, text=SOURCE):
    p = tmp_path / "train.py"
    p.write_text(text)
    return p


def test_fix_applies_safe_fixes_only_and_reports_what_is_left(tmp_path):
    p = _file(tmp_path)
    r = run_lint(*SELECT, "--fix", "--output-format", "concise", str(p))
    assert p.read_text() == NO_NOQA
    assert r.returncode == 1  # DDP006 is left: its fix is unsafe
    assert f"{p}:5:33: DDP006" in r.stdout and "DDP901" not in r.stdout
    assert "Fixed 1 finding." in r.stderr


def test_unsafe_fixes_fix_everything_and_exit_0(tmp_path):
    p = _file(tmp_path)
    r = run_lint(*SELECT, "--fix", "--unsafe-fixes", str(p))
    assert p.read_text() == NO_SHUFFLE.replace("  # noqa: DDP011", "")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "All checks passed!" in r.stdout


def test_exit_non_zero_on_fix(tmp_path):
    p = _file(tmp_path)
    r = run_lint(*SELECT, "--fix", "--unsafe-fixes", "--exit-non-zero-on-fix", str(p))
    assert r.returncode == 1 and "All checks passed!" in r.stdout
    # Nothing left to fix: a second run changes nothing and exits 0.
    again = run_lint(*SELECT, "--fix", "--unsafe-fixes", "--exit-non-zero-on-fix", str(p))
    assert again.returncode == 0, again.stdout + again.stderr


def test_fix_only_reports_nothing_and_exits_0_with_findings_left(tmp_path):
    p = _file(tmp_path)
    r = run_lint(*SELECT, "--fix-only", str(p))
    assert p.read_text() == NO_NOQA
    assert r.returncode == 0 and r.stdout == ""
    assert "Fixed 1 finding." in r.stderr
    assert run_lint(*SELECT, "--fix-only", "--exit-non-zero-on-fix", str(_file(tmp_path))).returncode == 1


def test_show_fixes_lists_fixes_per_file_and_code(tmp_path):
    p = _file(tmp_path)
    r = run_lint(*SELECT, "--fix", "--unsafe-fixes", "--show-fixes", str(p))
    assert f"Fixed 2 findings:\n- {p}:\n    1 × DDP006 (shuffle-with-sampler)\n    1 × DDP901 (unused-noqa)\n" in r.stdout


def test_diff_prints_the_change_writes_nothing_and_exits_1(tmp_path):
    p = _file(tmp_path)
    r = run_lint(*SELECT, "--diff", "--unsafe-fixes", str(p))
    assert p.read_text() == SOURCE
    assert r.returncode == 1
    assert f"--- a/{p}" in r.stdout
    assert "-loader = DataLoader(ds, shuffle=True, sampler=DistributedSampler(ds, shuffle=False))\n" in r.stdout
    assert "+loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=False))\n" in r.stdout
    assert "DDP006" not in r.stdout  # a diff, not a report
    assert "Would fix 2 findings." in r.stderr
    clean = _file(tmp_path, NO_SHUFFLE.replace("  # noqa: DDP011", ""))
    assert run_lint(*SELECT, "--diff", str(clean)).returncode == 0


def test_fix_on_stdin_writes_the_fixed_text_to_stdout(tmp_path):
    r = run_lint(*SELECT, "--fix", "--unsafe-fixes", "--stdin-filename", "train.py", "-", input=SOURCE)
    assert r.stdout == NO_SHUFFLE.replace("  # noqa: DDP011", "")
    assert r.returncode == 0


def test_add_noqa_cannot_be_combined_with_fix(tmp_path):
    r = run_lint("--add-noqa", "--fix", str(_file(tmp_path)))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "ddpcheck: error: --add-noqa cannot be combined with --fix, --fix-only or --diff; run them one after the other"]
