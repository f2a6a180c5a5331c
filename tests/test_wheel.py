"""The light install: build the wheel, install it in a fresh virtualenv without torch, and use it
from there as a user would — lint, rules, explain, --version, the pre-commit hook's entry — and
check that `ddpcheck run` says which extra to install. One venv serves every test (module scope)."""

from __future__ import annotations

import email
import os
import re
import shlex
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from ddpcheck import __version__
from tests.conftest import ROOT

# Builds a wheel and an sdist and installs them into fresh venvs: up to 600 s a step by its own limits.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

BAD = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    loader = DataLoader(dataset, batch_size=64)
    dist.destroy_process_group()
    """
)


def clean_env() -> dict[str, str]:
    """The environment of a shell with nothing of this checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=600, env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    (built,) = out.glob("ddpcheck-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv with only the wheel (and its required dependencies) installed."""
    home = tmp_path_factory.mktemp("light-venv")
    env = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    r = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                       capture_output=True, text=True, timeout=600, env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return env


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("user-project")
    (d / "bad.py").write_text(BAD)
    (d / "good.py").write_text("print('hello')\n")
    return d


def ddpcheck(venv: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "ddpcheck"), *args], cwd=workdir, capture_output=True,
                          text=True, timeout=120, env=clean_env())


def test_wheel_requires_only_the_light_dependencies_and_carries_the_pages(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = email.message_from_bytes(zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    required = sorted(re.split(r"[ ;<>=!~\[]", r)[0] for r in meta.get_all("Requires-Dist") if "extra ==" not in r)
    assert required == ["libcst", "rich", "typer"]
    assert any("torch" in r and "extra == 'run'" in r.replace('"', "'") for r in meta.get_all("Requires-Dist"))
    pages = sorted(p.name for p in (ROOT / "rules").glob("*.md"))
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("ddpcheck/_pages/")) == pages
    assert not any(n.startswith(("tests/", "fixtures/", "bench/", "scripts/")) for n in names)
    # Developer tools (page generation, corpus statistics) stay in the repository.
    assert not any(n.startswith("ddpcheck/tools/") for n in names)


def test_the_venv_has_no_torch_and_runs_the_installed_copy(venv, workdir):
    r = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util, ddpcheck; print(importlib.util.find_spec('torch')); print(ddpcheck.__file__)"],
        cwd=workdir, capture_output=True, text=True, env=clean_env(), timeout=60)
    spec, location = r.stdout.split()
    assert spec == "None"
    assert Path(location).is_relative_to(venv), location


def test_version(venv, workdir):
    r = ddpcheck(venv, workdir, "--version")
    assert (r.returncode, r.stdout.strip()) == (0, f"ddpcheck {__version__}")


def test_lint_from_the_wheel(venv, workdir):
    bad = ddpcheck(venv, workdir, "lint", "--output-format", "concise", "bad.py")
    assert bad.returncode == 1, bad.stderr
    assert bad.stdout.startswith("bad.py:5:10: DDP001 DataLoader has no DistributedSampler")
    good = ddpcheck(venv, workdir, "lint", "good.py")
    assert good.returncode == 0 and "All checks passed!" in good.stdout


def test_rules_and_explain_from_the_wheel(venv, workdir):
    rules = ddpcheck(venv, workdir, "rules")
    assert rules.returncode == 0 and "DDP001" in rules.stdout and "missing-distributed-sampler" in rules.stdout
    explain = ddpcheck(venv, workdir, "explain", "DDP001")
    assert explain.returncode == 0, explain.stderr
    packaged = next(venv.glob("lib/python*/site-packages/ddpcheck/_pages/DDP001.md"))
    # What `explain` prints is the page the wheel carries, which is the checkout's rules/DDP001.md.
    assert explain.stdout == packaged.read_text(encoding="utf-8") == (ROOT / "rules" / "DDP001.md").read_text(encoding="utf-8")
    assert "## How to fix" in explain.stdout


def test_the_hook_entry_from_the_wheel(venv, workdir):
    import yaml  # comes with pre-commit (the dev extra)

    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    entry = shlex.split(hooks["ddpcheck"]["entry"])
    assert entry[0] == "ddpcheck"
    r = ddpcheck(venv, workdir, *entry[1:], "bad.py", "good.py")
    assert r.returncode == 1 and "bad.py:5:10: DDP001" in r.stdout
    assert ddpcheck(venv, workdir, *entry[1:], "good.py").returncode == 0


def test_run_without_torch_names_the_extra(venv, workdir):
    (workdir / "x.py").write_text("print('never run')\n")
    r = ddpcheck(venv, workdir, "run", "--nproc", "2", "x.py")
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ddpcheck: error: ") and "pip install 'ddpcheck[run]'" in lines[0]
    assert "Traceback" not in r.stderr
