"""The helpers every test shares: where things are, the environment a child process gets, and the
ways a test runs ddpcheck as a user would: a command that returns at once (`python -m ddpcheck
...`, or `ddpcheck lint` through the same entry point inside the test process), and a `ddpcheck
run` job whose JSON report and surviving processes the test inspects.

conftest.py, runtime/rt_helpers.py and runtime/diag_jobs.py import from here; new tests should too.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
MARK = "DDPCHECK_TEST_MARK"  # set in a job's environment, so its surviving processes can be found
# Set once for the whole test session (conftest.py): every process a test starts inherits it, so
# whatever outlives its test (a job killed on a timeout leaves torchrun's workers) is found at the end.
SESSION_MARK = "DDPCHECK_TEST_SESSION"


def cli_env(*, columns: int | None = 120, **extra: str) -> dict[str, str]:
    """The environment for a child ddpcheck: this checkout first on PYTHONPATH (so the tests also
    pass from an editable install), colour as a pipe gets it, a fixed terminal width (`None`: no
    width at all, as a pipe in CI has; a pytest-xdist worker would otherwise pass on its own
    COLUMNS=80, which cuts the run tables' last columns)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    env.pop("OMP_NUM_THREADS", None)  # torchrun sets 1 per worker; more is 7-20x slower on 2 cores
    if columns is not None:
        env["COLUMNS"] = str(columns)
    else:
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
    env.update(extra)
    return env


def run_cli(*args: str, cwd: str | Path | None = None, input: str | None = None,
            env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m ddpcheck ARGS` as a user would run it; returns the completed process."""
    mark = uuid.uuid4().hex
    try:
        return subprocess.run(
            [sys.executable, "-m", "ddpcheck", *args],
            cwd=cwd or ROOT,
            input=input,
            capture_output=True,
            text=True,
            env={**(env or cli_env()), MARK: mark},
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        kill_survivors(mark)  # the timeout killed ddpcheck only, not what it started
        raise


def run_lint(*args: str, cwd: str | Path | None = None, input: str | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ddpcheck lint ARGS` through the console script's entry point (`ddpcheck.cli.main`), run in
    this process: the command a user types, without the half second a fresh interpreter spends
    importing libcst, which over a thousand lint cases was most of the quick subset's time. The
    call sees what a child started by `run_cli` would: its environment (`cli_env` unless `env`),
    its working directory, `input` on stdin, stdout and stderr as pipes, and no cache left from an
    earlier call. What only a real process shows (the console script itself, a broken pipe, a
    crash's exit) is tested through `run_cli`."""
    from ddpcheck.cli import main

    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8")
    forget_process_state()
    with _child_environment(env or cli_env(), Path(cwd or ROOT)), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err), _stdin(stdin):
        try:
            main(["lint", *args])
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    forget_process_state()  # frees the parsed trees the caches hold
    return subprocess.CompletedProcess(["ddpcheck", "lint", *args], code, out.getvalue(), err.getvalue())


def forget_process_state() -> None:
    """Empty every function-level cache in ddpcheck's modules: a command's caches (a folder's
    project root, a module's parsed tree) last as long as its process and assume the files do not
    change under it, which a test that lints, edits and lints again in one process breaks."""
    for name, module in list(sys.modules.items()):
        if name != "ddpcheck" and not name.startswith("ddpcheck."):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


@contextlib.contextmanager
def _child_environment(env: dict[str, str], cwd: Path):
    """os.environ and the working directory as `run_cli` gives a child, restored afterwards."""
    saved, here = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _stdin(stream: io.TextIOWrapper):
    saved = sys.stdin
    sys.stdin = stream
    try:
        yield
    finally:
        sys.stdin = saved


@dataclass
class Job:
    """A finished `ddpcheck run`: its output, its JSON report (None when none was written) and the
    mark its processes carried."""

    returncode: int
    stdout: str
    stderr: str
    report: dict | None
    mark: str

    @property
    def codes(self) -> set[str]:
        return {f["code"] for f in self.report["findings"]}

    def check(self, code: str) -> dict:
        return next(c for c in self.report["run"]["checks"] if c["code"] == code)

    def status(self, code: str) -> str:
        return self.check(code)["status"]


def run_job(args: list[str], tmp_path: Path, *, cwd: Path = ROOT, timeout: float = 240,
            env: dict[str, str] | None = None) -> Job:
    """`python -m ddpcheck run --report ... ARGS` to the end, its processes marked."""
    mark = uuid.uuid4().hex
    report = tmp_path / f"report-{mark[:8]}.json"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ddpcheck", "run", "--report", str(report), *args],
            cwd=cwd, capture_output=True, text=True, timeout=timeout,
            env={**(env or cli_env(columns=None)), MARK: mark},
        )
    except subprocess.TimeoutExpired:
        kill_survivors(mark)  # the timeout killed ddpcheck only, not torchrun and its workers
        raise
    data = json.loads(report.read_text()) if report.exists() else None
    return Job(proc.returncode, proc.stdout, proc.stderr, data, mark)


def write_project(root: Path, files: dict[str, str]) -> None:
    """Write a small project: each name (a path under `root`) gets its dedented text."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def lint_findings(root: Path, *targets: str, select: str = "DDP0") -> list[dict]:
    """`ddpcheck lint --output-format json` on files under `root`, as a user runs it: the findings."""
    r = run_lint( "--no-cache", "--exit-zero", "--select", select, "--output-format", "json",
                *(str(root / t) for t in targets))
    assert r.returncode == 0, r.stderr
    findings: list[dict] = json.loads(r.stdout)["findings"]
    return findings


def lint_project(root: Path, files: dict[str, str], *targets: str, select: str = "DDP0") -> list[dict]:
    """Write a small project under `root` (`write_project`) and lint `targets` in it (`lint_findings`)."""
    write_project(root, files)
    return lint_findings(root, *targets, select=select)


def finding_lines(root: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` of the project `files` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(root, files, target, select=select))


def finding_set(root: Path, *targets: str, select: str = "DDP0") -> set[tuple[str, int, str]]:
    """(file name, line, code) of each finding."""
    return {(Path(f["path"]).name, f["location"]["line"], f["code"]) for f in lint_findings(root, *targets, select=select)}


def copy_fixture(name: str, tmp_path: Path) -> Path:
    """A private copy of fixtures/run/NAME, so that paths in the report are this test's."""
    target = tmp_path / name
    shutil.copy(FIXTURES / "run" / name, target)
    return target


def survivors(mark: str, variable: str = MARK) -> list[int]:
    """Pids of live processes whose environment carries `mark` (a run's processes, children included)."""
    found = []
    needle = f"{variable}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                status = (entry / "status").read_text()
                if "State:\tZ" not in status:
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_survivors(mark: str, variable: str = MARK) -> list[int]:
    """SIGKILL every live process carrying `mark`; the pids it found."""
    left = survivors(mark, variable)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def assert_no_survivors(mark: str) -> None:
    deadline = time.monotonic() + 10  # torchrun's own teardown may still be reaping
    while survivors(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = kill_survivors(mark)  # do not leave them to the next test either
    assert not left, f"processes of the run survived it: {left}"


def libcst_field_types():
    """(node type, field name, the concrete node types the field may hold) for every field of
    every libcst node type, read from libcst's annotations."""
    import dataclasses
    import typing

    import libcst as cst

    def types_in(hint):
        args = typing.get_args(hint)
        return [t for a in args for t in types_in(a)] if args else [hint]

    concrete = [c for c in vars(cst).values() if isinstance(c, type) and issubclass(c, cst.CSTNode)
                and not getattr(c, "__abstractmethods__", None)]
    for node_type in concrete:
        if not dataclasses.is_dataclass(node_type):
            continue
        hints = typing.get_type_hints(node_type, globalns=dict(vars(cst)))
        for field in dataclasses.fields(node_type):
            held = {c for hint in types_in(hints[field.name]) if isinstance(hint, type) and issubclass(hint, cst.CSTNode)
                    for c in concrete if issubclass(c, hint)}
            yield node_type, field.name, held
