"""`# noqa` through the real entry point: `--add-noqa` (merged, idempotent, never inside a string)
and DDP901 (a directive that suppresses nothing), whose fix removes exactly what is unused."""

from __future__ import annotations

import textwrap

from tests.conftest import run_cli

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
    before = run_cli("lint", "--output-format", "concise", str(p))
    assert before.returncode == 1
    r = run_cli("lint", "--add-noqa", str(p))
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
    assert run_cli("lint", str(p)).returncode == 0
    again = run_cli("lint", "--add-noqa", str(p))
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
    assert run_cli("lint", str(p)).returncode == 0  # off by default, like Ruff's RUF100
    r = run_cli("lint", "--extend-select", "DDP901", "--output-format", "concise", str(p))
    assert r.returncode == 1
    reported = [line for line in r.stdout.splitlines() if ": DDP901" in line]
    # Nothing fires on line 4 (the group is destroyed, gloo needs no device) or 5; the other
    # tool's code, the bare noqa, the string and the runtime prefix are left alone.
    assert reported == [
        f"{p}:4:34: DDP901 [*] `noqa` directive suppresses nothing (unused: DDP005, DDP003): remove it",
        f"{p}:5:58: DDP901 [*] `noqa` directive suppresses nothing (unused: DDP001): remove it",
        f"{p}:6:8: DDP901 [*] `noqa` directive suppresses nothing (unknown: DDP777): remove it",
    ]
    fixed = run_cli("lint", "--extend-select", "DDP901", "--fix", str(p))
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
    r = run_cli("lint", "--extend-select", "DDP901", "--output-format", "concise", str(p))
    assert r.returncode == 0, r.stdout
