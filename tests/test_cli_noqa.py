"""`# noqa` through the real entry point: `--add-noqa` (merged, idempotent, never inside a string)
and DDP901 (a directive that suppresses nothing), whose fix removes exactly what is unused."""

from __future__ import annotations

import textwrap

from tests.helpers import run_lint

SCRIPT = textwrap.dedent(
    '''\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo")
    loader = DataLoader(dataset, batch_size=64, shuffle=True)  # noqa: E501
    aux = DataLoader(dataset,
                     batch_size=64)
    state = torch.load("ckpt.pt")  # noqa: DDP005
    HELP = """
    text"""; other = DataLoader(dataset)
    '''
)


def test_add_noqa_marks_every_reported_line_and_is_idempotent(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    before = run_lint("--output-format", "concise", str(p))
    assert before.returncode == 1
    r = run_lint("--add-noqa", str(p))
    assert r.returncode == 0, r.stderr
    text = p.read_text()
    lines = text.splitlines()
    # Appended after the code, merged with another tool's codes and with our own.
    assert lines[4] == 'dist.init_process_group("gloo")  # noqa: DDP005'
    assert lines[5] == "loader = DataLoader(dataset, batch_size=64, shuffle=True)  # noqa: E501, DDP001"
    assert lines[6] == "aux = DataLoader(dataset,  # noqa: DDP001"
    assert lines[8] == 'state = torch.load("ckpt.pt")  # noqa: DDP005, DDP011'
    # A line that ends inside a string cannot hold a comment: the finding's last line gets it.
    assert lines[9] == 'HELP = """'
    assert lines[10] == 'text"""; other = DataLoader(dataset)  # noqa: DDP001'
    assert r.stderr.strip() == "Added 5 noqa directives."
    compile(text, str(p), "exec")
    assert run_lint(str(p)).returncode == 0
    again = run_lint("--add-noqa", str(p))
    assert again.stderr.strip() == "Added 0 noqa directives."
    assert p.read_text() == text


def test_unused_noqa_is_off_by_default_and_reported_when_selected(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(
        """\
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")  # noqa: DDP005, DDP003
        loader = DataLoader(ds, sampler=DistributedSampler(ds))  # noqa: DDP001  # per GPU
        x = 1  # noqa: E501, DDP777
        y = 2  # noqa
        s = "# noqa: DDP001"
        dist.destroy_process_group()  # noqa: DDP1
        """))
    assert run_lint(str(p)).returncode == 0  # off by default, like Ruff's RUF100
    r = run_lint("--extend-select", "DDP901", "--output-format", "concise", str(p))
    assert r.returncode == 1
    reported = [line for line in r.stdout.splitlines() if ": DDP901" in line]
    # Nothing fires on line 4 (the group is destroyed, gloo needs no device) or 5; the other
    # tool's code, the bare noqa, the string and the runtime prefix are left alone.
    assert reported == [
        f"{p}:4:34: DDP901 [*] `noqa` directive suppresses nothing (unused: DDP005, DDP003): remove it",
        f"{p}:5:58: DDP901 [*] `noqa` directive suppresses nothing (unused: DDP001): remove it",
        f"{p}:6:8: DDP901 [*] `noqa` directive suppresses nothing (unknown: DDP777): remove it",
    ]
    fixed = run_lint("--extend-select", "DDP901", "--fix", str(p))
    assert fixed.returncode == 0, fixed.stdout
    assert p.read_text().splitlines()[3:6] == [
        'dist.init_process_group("gloo")',
        "loader = DataLoader(ds, sampler=DistributedSampler(ds))  # per GPU",
        "x = 1  # noqa: E501",
    ]


def test_a_used_noqa_is_not_reported(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(
        """\
        import torch.distributed as dist
        from torch.utils.data import DataLoader

        dist.init_process_group("gloo")  # noqa: DDP005
        loader = DataLoader(ds, shuffle=True)  # noqa: DDP0
        """))
    r = run_lint("--extend-select", "DDP901", "--output-format", "concise", str(p))
    assert r.returncode == 0, r.stdout


# A finding the script's lint shows in a helper module of the project (where its
# init_process_group runs): settings and suppression follow the file it is shown in.
HELPER = textwrap.dedent(
    """\
    import os

    import torch.distributed as dist


    def init_distributed_mode(args):
        args.rank = int(os.environ["RANK"])
        dist.init_process_group("nccl")
        return args
    """
)
MAIN = textwrap.dedent(
    """\
    import argparse

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import utils


    def main():
        args = argparse.Namespace()
        utils.init_distributed_mode(args)
        model = DDP(torch.nn.Linear(4, 4).cuda())
        for step in range(10):
            model(torch.randn(2, 4).cuda()).sum().backward()
        torch.distributed.destroy_process_group()


    if __name__ == "__main__":
        main()
    """
)


def _helper_project(tmp_path, pyproject: str | None = None):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "utils.py").write_text(HELPER)
    (tmp_path / "main.py").write_text(MAIN)
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    return lambda *args: run_lint("--no-cache", "--output-format", "concise", *args, cwd=tmp_path)


def test_a_finding_shown_in_a_helper_obeys_the_helpers_settings(tmp_path):
    lint = _helper_project(tmp_path)
    shown = lint("main.py")
    assert shown.returncode == 1 and shown.stdout.startswith("utils.py:8:5: DDP003"), shown.stdout
    ignored = _helper_project(tmp_path / "a", '[tool.ddpcheck.per-file-ignores]\n"utils.py" = ["DDP003"]\n')
    assert ignored("main.py").returncode == 0
    excluded = _helper_project(tmp_path / "b", '[tool.ddpcheck]\nextend-exclude = ["utils.py"]\n')
    assert excluded("main.py").returncode == 0
    other = _helper_project(tmp_path / "c", '[tool.ddpcheck.per-file-ignores]\n"main.py" = ["DDP001"]\n')
    assert other("main.py").returncode == 1  # another file's ignores do not reach it


def test_add_noqa_marks_the_helper_line_and_the_directive_counts_as_used(tmp_path):
    lint = _helper_project(tmp_path)
    added = run_lint("--add-noqa", "main.py", cwd=tmp_path)
    assert added.returncode == 0 and "Added 1 noqa directive" in added.stderr, added.stderr
    assert '    dist.init_process_group("nccl")  # noqa: DDP003\n' in (tmp_path / "utils.py").read_text()
    assert lint("main.py").returncode == 0
    # Linting both files: main.py's finding in utils.py uses the directive, so it is not unused;
    # the same with worker processes.
    for jobs in ("-j1", "-j2"):
        both = lint("--extend-select", "DDP901", jobs, "main.py", "utils.py")
        assert both.returncode == 0, both.stdout
    (tmp_path / "utils.py").write_text((tmp_path / "utils.py").read_text().replace("DDP003", "DDP003, DDP010"))
    partly = lint("--extend-select", "DDP901", "main.py", "utils.py")
    assert "utils.py:8:38: DDP901" in partly.stdout and "(unused: DDP010)" in partly.stdout, partly.stdout
