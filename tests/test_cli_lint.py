"""`ddpcheck lint` through the real entry point: exit codes, formats, config, suppression, bad input.
A few cases run the console command in a fresh process (`run_cli`); the rest call its entry point
in this one (`run_lint`)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.conftest import cli_env, run_cli
from tests.helpers import run_lint

BAD = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    dist.destroy_process_group()
    """
)


@pytest.fixture
def bad(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(BAD)
    return p


def test_findings_exit_1_and_concise_format(bad):
    r = run_cli("lint", "--output-format", "concise", str(bad))
    assert r.returncode == 1, r.stderr
    assert f"{bad}:5:10: DDP001 DataLoader has no DistributedSampler" in r.stdout
    assert "1  DDP001  missing-distributed-sampler" in r.stdout


def test_clean_file_exit_0(tmp_path):
    p = tmp_path / "ok.py"
    p.write_text("print('hello')\n")
    r = run_cli("lint", str(p))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "All checks passed!" in r.stdout


def test_exit_zero(bad):
    assert run_lint("--exit-zero", str(bad)).returncode == 0


def test_full_format_shows_source_line_and_marker_without_color(bad):
    r = run_lint(str(bad))
    assert "5 | loader = DataLoader(dataset, batch_size=64, shuffle=True)" in r.stdout
    assert "^^^^" in r.stdout
    assert "\x1b[" not in r.stdout  # not a TTY: no colour


def test_force_color_and_no_color(bad):
    colored = run_cli("lint", str(bad), env=cli_env(FORCE_COLOR="1"))
    assert "\x1b[" in colored.stdout
    plain = run_cli("lint", str(bad), env=cli_env(FORCE_COLOR="1", NO_COLOR="1"))
    assert "\x1b[" not in plain.stdout


def test_json_format_schema(bad):
    r = run_lint("--output-format", "json", str(bad))
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["command"] == "lint"
    (f,) = doc["findings"]
    assert f["code"] == "DDP001" and f["location"] == {"line": 5, "column": 10}
    assert f["severity"] == "warning" and f["path"] == str(bad)
    assert doc["summary"] == {"total": 1, "by_code": {"DDP001": 1}}


def test_github_format(bad):
    r = run_lint("--output-format", "github", str(bad))
    line = r.stdout.strip().splitlines()[0]
    assert line.startswith(f"::warning file={bad},line=5,col=10,")
    assert "::DDP001 missing-distributed-sampler: DataLoader has no DistributedSampler" in line


def test_select_ignore_and_prefixes(bad):
    assert run_lint("--ignore", "DDP001", str(bad)).returncode == 0
    assert run_lint("--ignore", "DDP0", str(bad)).returncode == 0
    assert run_lint("--select", "DDP900", str(bad)).returncode == 0
    assert run_lint("--select", "DDP9", "--extend-select", "DDP001", str(bad)).returncode == 1


def test_unknown_code_is_one_line_exit_2(bad):
    r = run_cli("lint", "--select", "DDP777", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip() == "ddpcheck: error: --select: unknown rule code or prefix 'DDP777'; run `ddpcheck rules` to list codes"


def test_noqa_on_the_line(tmp_path):
    p = tmp_path / "t.py"
    p.write_text(BAD.replace("shuffle=True)", "shuffle=True)  # noqa: DDP001"))
    assert run_lint(str(p)).returncode == 0
    p.write_text(BAD.replace("shuffle=True)", "shuffle=True)  # noqa"))
    assert run_lint(str(p)).returncode == 0
    p.write_text(BAD.replace("shuffle=True)", "shuffle=True)  # noqa: DDP002"))
    assert run_lint(str(p)).returncode == 1


def test_file_level_noqa(tmp_path):
    p = tmp_path / "t.py"
    p.write_text("# ddpcheck: noqa: DDP001\n" + BAD)
    assert run_lint(str(p)).returncode == 0
    p.write_text("# ddpcheck: noqa\n" + BAD)
    assert run_lint(str(p)).returncode == 0
    p.write_text("# ddpcheck: noqa: DDP005\n" + BAD)
    assert run_lint(str(p)).returncode == 1


def test_pyproject_config_select_ignore_per_file(tmp_path, bad):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpcheck]\nignore = ["DDP001"]\n')
    assert run_lint(str(bad), cwd=tmp_path).returncode == 0
    # The CLI overrides the file.
    assert run_lint("--select", "DDP001", str(bad), cwd=tmp_path).returncode == 1
    (tmp_path / "pyproject.toml").write_text('[tool.ddpcheck.per-file-ignores]\n"train.py" = ["DDP001"]\n')
    assert run_lint(str(bad), cwd=tmp_path).returncode == 0


def test_config_found_from_the_file_not_the_cwd(tmp_path, bad):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpcheck]\nignore = ["DDP0"]\n')
    elsewhere = tmp_path.parent
    assert run_lint(str(bad), cwd=elsewhere).returncode == 0


@pytest.mark.parametrize(
    "content,expected",
    [
        ('[tool.ddpcheck]\nselect = ["DDP0"\n', "invalid TOML"),
        ('[tool.ddpcheck]\nselekt = ["DDP0"]\n', "unknown key 'selekt'"),
        ('[tool.ddpcheck]\nignore = ["XYZ1"]\n', "unknown rule code or prefix 'XYZ1'"),
        ('[tool.ddpcheck]\nignore = "DDP001"\n', "must be a list of strings"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, bad, content, expected):
    (tmp_path / "pyproject.toml").write_text(content)
    r = run_lint(str(bad), cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and "pyproject.toml" in err[0], r.stderr
    assert "Traceback" not in r.stderr


def test_bad_config_beside_the_files_named_is_one_line_exit_2(tmp_path, bad):
    # Files named on the command line, their pyproject.toml found beside them (not in the cwd):
    # the same one line as for a folder, not an "internal error" per file.
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.ddpcheck]\nselect = 5\n')
    (project / "train.py").write_text(bad.read_text())
    (project / "util.py").write_text("x = 1\n")
    r = run_lint(str(project / "train.py"), str(project / "util.py"), cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "must be a list of strings" in err[0] and "pyproject.toml" in err[0], r.stderr
    assert "internal error" not in r.stderr


def test_explicit_config_file(tmp_path, bad):
    cfg = tmp_path / "other.toml"
    cfg.write_text('[tool.ddpcheck]\nignore = ["DDP001"]\n')
    assert run_lint("--config", str(cfg), str(bad)).returncode == 0
    r = run_lint("--config", str(tmp_path / "missing.toml"), str(bad))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_a_value_that_flows_through_its_own_call_is_checked_not_an_internal_error(tmp_path):
    # `timed(fn)` runs `fn()`; the loss it returns is handed back as `timed(loss.backward)`: the
    # call's callee depends on the call's own result. Unknown there, not an endless descent.
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import time
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def timed(fn):
            start = time.perf_counter()
            result = fn()
            return result, time.perf_counter() - start

        def step(model, optimizer, x, y):
            out, _ = timed(lambda: model(x))
            loss, _ = timed(lambda: torch.nn.functional.cross_entropy(out, y))
            _, spent = timed(loss.backward)
            _, spent = timed(optimizer.step)
            return spent

        def main():
            dist.init_process_group("gloo")
            model = DDP(torch.nn.Linear(4, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(3):
                step(model, optimizer, torch.randn(8, 4), torch.randint(0, 2, (8,)))
            dist.destroy_process_group()

        if __name__ == "__main__":
            main()
        """))
    r = run_lint("--output-format", "json", str(script))
    assert "internal error" not in r.stderr and r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["errors"] == []


def test_syntax_error_is_a_finding_and_others_still_linted(tmp_path, bad):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ndef f(:\n    pass\n")
    r = run_lint("--output-format", "concise", str(broken), str(bad))
    assert r.returncode == 1
    assert f"{broken}:2:7: DDP900 cannot parse: invalid syntax" in r.stdout
    assert "DDP001" in r.stdout


def test_missing_path_and_non_utf8_are_errors_rest_linted(tmp_path, bad):
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9'\n")
    r = run_lint("--output-format", "concise", str(tmp_path / "nope.py"), str(latin), str(bad))
    assert r.returncode == 2
    assert f"ddpcheck: error: {tmp_path / 'nope.py'}: no such file or directory" in r.stderr
    assert f"ddpcheck: error: {latin}: cannot read: not valid utf-8 (byte 0xe9 at offset 5); save the file as UTF-8" in r.stderr
    assert "DDP001" in r.stdout
    assert "Traceback" not in r.stderr


def test_declared_encoding_is_honoured(tmp_path):
    p = tmp_path / "latin.py"
    p.write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n")
    assert run_lint(str(p)).returncode == 0


def test_directory_without_python_files(tmp_path):
    (tmp_path / "empty").mkdir()
    r = run_lint(str(tmp_path / "empty"))
    assert r.returncode == 2 and "no Python files to lint" in r.stderr


def test_directory_walk_skips_venvs_excludes_and_gitignore(tmp_path):
    import subprocess

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BAD)
    for skipped in (".venv/lib", "build", "generated", "__pycache__"):
        (tmp_path / skipped).mkdir(parents=True)
        (tmp_path / skipped / "x.py").write_text(BAD)
    (tmp_path / "ignored_by_git.py").write_text(BAD)
    (tmp_path / ".gitignore").write_text("ignored_by_git.py\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    r = run_lint("--output-format", "concise", "--extend-exclude", "generated", ".", cwd=tmp_path)
    flagged = {line.split(":")[0] for line in r.stdout.splitlines() if "DDP001" in line and ":" in line}
    assert flagged == {"pkg/train.py"}, r.stdout


def test_named_excluded_file_needs_force_exclude(tmp_path):
    (tmp_path / "build").mkdir()
    p = tmp_path / "build" / "x.py"
    p.write_text(BAD)
    assert run_lint("build/x.py", cwd=tmp_path).returncode == 1
    assert run_lint("--force-exclude", "build/x.py", cwd=tmp_path).returncode == 0


def test_stdin_with_filename(tmp_path):
    r = run_cli("lint", "--output-format", "concise", "--stdin-filename", "train.py", "-", input=BAD)
    assert r.returncode == 1
    assert r.stdout.startswith("train.py:5:10: DDP001")


def test_lint_never_executes_the_code(tmp_path):
    marker = tmp_path / "executed"
    p = tmp_path / "evil.py"
    p.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nimport torch.distributed as dist\n")
    run_lint(str(p))
    assert not marker.exists()


def test_lint_does_not_import_torch(tmp_path, bad):
    code = (
        "import sys; from ddpcheck.cli import main\n"
        "try:\n    main(['lint', '--output-format', 'json', sys.argv[1]])\n"
        "except SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print('TORCH', bad, file=sys.stderr)\n"
    )
    import subprocess

    r = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, env=cli_env())
    assert "TORCH []" in r.stderr, r.stderr


def test_internal_errors_never_show_a_traceback(tmp_path):
    r = run_lint("--output-format", "nope", ".")
    assert r.returncode == 2 and "unknown format" in r.stderr and "Traceback" not in r.stderr


def test_per_file_ignores_all(tmp_path, bad):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpcheck.per-file-ignores]\n"train.py" = ["ALL"]\n')
    assert run_lint(str(bad), cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.ddpcheck.per-file-ignores]\n"other.py" = ["ALL"]\n')
    assert run_lint(str(bad), cwd=tmp_path).returncode == 1


def test_the_lint_path_imports_only_what_it_uses(bad):
    # A pre-commit run pays for every import: no typer/pydantic (the other commands' parser),
    # no libcst.matchers, no rich for a format that does not colour, no runtime check module.
    code = (
        "import sys; from ddpcheck.cli import main\n"
        "try:\n    main(['lint', '--no-cache', '--output-format', 'concise', sys.argv[1]])\n"
        "except SystemExit:\n    pass\n"
        "heavy = ('typer', 'pydantic', 'rich', 'libcst.matchers', 'ddpcheck.run.checks')\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)\n"
    )
    import subprocess

    r = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, env=cli_env())
    assert "LOADED []" in r.stderr, r.stderr

