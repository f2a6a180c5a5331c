"""The pre-commit hooks through the real pre-commit: `try-repo` against this checkout, and a
`.pre-commit-config.yaml` pinned to a commit of it, in a throwaway git repository that holds a good
and a bad training script.

pre-commit builds the hook's virtualenv and pip-installs this checkout with its dependencies from
the configured registry (~40 s here for each fresh environment): `try-repo` always starts fresh,
so it runs once; the configured hook's environment is installed once and reused by the rest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

# pre-commit builds the hook's environment (a pip install) the first time: up to 600 s by its own limit.
pytestmark = pytest.mark.timeout(1500)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GOOD = textwrap.dedent(
    """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def main():
        dist.init_process_group("gloo")
        world = dist.get_world_size()
        dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        model = DDP(torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * world)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """
)
# The same script with the sampler forgotten: every rank reads the whole dataset (DDP001, line 5).
BAD = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    dist.init_process_group("gloo")
    loader = DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=32, shuffle=True)
    for (x,) in loader:
        pass
    dist.destroy_process_group()
    """
)
# Two mistakes whose fixes are unsafe (they change behaviour): DDP002 adds `sampler.set_epoch(epoch)`,
# DDP006 drops `shuffle=True`.
NEEDS_FIX = textwrap.dedent(
    """\
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, shuffle=True)
    for epoch in range(2):
        for batch in loader:
            pass
    dist.destroy_process_group()
    """
)
TARGET_PYPROJECT = textwrap.dedent(
    """\
    [project]
    name = "my-training"
    version = "0"

    [tool.ddpcheck]
    extend-exclude = ["vendored"]

    [tool.ddpcheck.per-file-ignores]
    "legacy/*" = ["DDP001"]
    """
)
GIT_ID = ["-c", "user.name=ddpcheck tests", "-c", "user.email=tests@ddpcheck.invalid", "-c", "commit.gpgsign=false"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def pre_commit(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PRE_COMMIT_HOME"] = str(home)
    env.pop("PYTHONPATH", None)  # the hook must run from its own install, not this checkout
    env.pop("PRE_COMMIT_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args, "--color", "never"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """A user's repository: a good and a bad script, a legacy file its config exempts from DDP001,
    a vendored file its config excludes, and a `[tool.ddpcheck]` table saying so."""
    repo = tmp_path_factory.mktemp("target")
    (repo / "good.py").write_text(GOOD)
    (repo / "bad.py").write_text(BAD)
    (repo / "legacy").mkdir()
    (repo / "legacy" / "old.py").write_text(BAD)
    (repo / "vendored").mkdir()
    (repo / "vendored" / "gen.py").write_text(BAD)
    (repo / "broken.py").write_text("def train(:\n    pass\n")
    (repo / "needs_fix.py").write_text(NEEDS_FIX)
    (repo / "pyproject.toml").write_text(TARGET_PYPROJECT)
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "training scripts", cwd=repo)
    return repo


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> tuple[Path, str]:
    """This checkout as a hook repository at a commit: its tracked and untracked (not ignored)
    files, as they are now, committed in a fresh repo — what a tag of ddpcheck would hold."""
    repo = tmp_path_factory.mktemp("ddpcheck-hooks")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            dest = repo / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "ddpcheck hooks", cwd=repo)
    return repo, git("rev-parse", "HEAD", cwd=repo).strip()


@pytest.mark.slow
@needs_git
def test_try_repo_blocks_the_bad_script_and_honours_the_target_config(target, tmp_path):
    r = pre_commit("try-repo", str(ROOT), "ddpcheck", "--files",
                   "good.py", "bad.py", "legacy/old.py", "vendored/gen.py", cwd=target, home=tmp_path / "home")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "- exit code: 1" in out
    assert "bad.py:5:10: DDP001 DataLoader has no DistributedSampler" in out
    assert "Found 1 finding" in out
    # good.py has nothing; legacy/ is exempt by per-file-ignores, vendored/ excluded (and
    # --force-exclude makes that stick although pre-commit names the file).
    assert "good.py:" not in out and "legacy/old.py:" not in out and "vendored/gen.py:" not in out


@pytest.fixture(scope="module")
def configured(target, hook_repo, tmp_path_factory):
    """Run the configured hooks in `target` with a given `args:` list (None: no args)."""
    home = tmp_path_factory.mktemp("pre-commit-home")
    repo, rev = hook_repo

    def run(*files: str, hook: str = "ddpcheck", args: list[str] | None = None) -> subprocess.CompletedProcess:
        hooks = f"    -   id: {hook}\n"
        if args is not None:
            hooks += f"        args: [{', '.join(args)}]\n"
        (target / ".pre-commit-config.yaml").write_text(
            f"repos:\n-   repo: {repo}\n    rev: {rev}\n    hooks:\n{hooks}")
        return pre_commit("run", hook, "--files", *files, cwd=target, home=home)

    run.home = home
    return run


@pytest.mark.slow
@needs_git
def test_configured_hook_passes_the_good_script_and_blocks_the_bad(configured):
    good = configured("good.py")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ddpcheck" in good.stdout and "Passed" in good.stdout
    bad = configured("bad.py", "good.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout and "bad.py:5:10: DDP001" in bad.stdout


@pytest.mark.slow
@needs_git
def test_configured_args_are_honoured(configured):
    # --select=DDP900 turns DDP001 off: the bad script passes, the file that does not parse fails.
    selected = configured("bad.py", args=["--select=DDP900"])
    assert selected.returncode == 0, selected.stdout + selected.stderr
    broken = configured("broken.py", "bad.py", args=["--select=DDP900"])
    assert broken.returncode == 1
    assert "broken.py:1:" in broken.stdout and "DDP900" in broken.stdout and "DDP001" not in broken.stdout
    # A bad argument is one clear line, and blocks.
    wrong = configured("bad.py", args=["--select=NOPE1"])
    assert wrong.returncode != 0
    assert "unknown rule code or prefix 'NOPE1'" in wrong.stdout
    assert "Traceback" not in wrong.stdout


@pytest.mark.slow
@needs_git
def test_fix_hook_applies_fixes(configured, target):
    assert configured("good.py", hook="ddpcheck-fix").returncode == 0
    # Safe fixes only by default: DDP006's is safe here (the DistributedSampler shuffles by
    # itself), DDP002's is not (the order changes): the file gets the first, the commit is
    # blocked on the second.
    r = configured("needs_fix.py", hook="ddpcheck-fix")
    assert r.returncode == 1 and "DDP002" in r.stdout and "DDP006" not in r.stdout, r.stdout + r.stderr
    assert "files were modified by this hook" in r.stdout
    safe = (target / "needs_fix.py").read_text()
    assert safe == NEEDS_FIX.replace(", shuffle=True", "")
    # With --unsafe-fixes in args: the rest is fixed too, pre-commit says so and blocks once ...
    r = configured("needs_fix.py", hook="ddpcheck-fix", args=["--unsafe-fixes"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "files were modified by this hook" in r.stdout
    fixed = (target / "needs_fix.py").read_text()
    assert "sampler.set_epoch(epoch)" in fixed and "shuffle=True" not in fixed
    # ... and the fixed file passes the lint hook.
    assert configured("needs_fix.py").returncode == 0


@pytest.mark.slow
@needs_git
def test_installing_the_hook_does_not_install_torch(configured):
    configured("good.py")  # make sure the environment exists
    site_dirs = list(Path(configured.home).glob("repo*/py_env-*/lib/python*/site-packages"))
    assert site_dirs, list(Path(configured.home).iterdir())
    installed = {p.name.lower() for d in site_dirs for p in d.iterdir()}
    assert "ddpcheck" in installed and "libcst" in installed
    assert "torch" not in installed, sorted(installed)
    pages = [p for d in site_dirs for p in (d / "ddpcheck" / "_pages").glob("DDP*.md")]
    assert pages, "the installed hook lacks the rule pages"


def test_hook_definitions_are_shaped_like_ruffs_and_match_the_docs():
    import yaml  # comes with pre-commit (the dev extra)

    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"ddpcheck", "ddpcheck-fix"}
    assert hooks["ddpcheck"]["entry"] == "ddpcheck lint --force-exclude"
    assert hooks["ddpcheck-fix"]["entry"] == "ddpcheck lint --force-exclude --fix"
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "pyi"]
        assert hook["require_serial"] is True
    readme = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    snippet = re.search(r"## pre-commit\n.*?```yaml\n(.*?)```", readme, re.S).group(1)
    config = yaml.safe_load(snippet)
    (repo,) = config["repos"]
    assert {h["id"] for h in repo["hooks"]} <= set(hooks)
