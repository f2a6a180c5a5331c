"""The decisions behind test_unread_scripts.py, on small inputs (no job is launched): when CUDA
questions get the emulated answer, what tells shared data from data made per rank, which
parameter differs first, and how the summary counts warnings and skipped checks."""

from __future__ import annotations

import textwrap

from ddpcheck.run.checks import _samples
from ddpcheck.run.checks.model_match import first_difference
from ddpcheck.run.launcher import results
from ddpcheck.run.launcher.judging import Row
from ddpcheck.run.rank import emulate
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Verdict


def _script(tmp_path, text: str):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _line(path: str, text: str) -> int:
    return next(i for i, t in enumerate(open(path).read().splitlines(), 1) if text in t)


def test_a_question_that_requires_cuda_is_told_apart_from_one_that_only_asks(tmp_path):
    path = _script(tmp_path, """
        import sys, torch
        assert torch.cuda.is_available(), "needs GPUs"
        if not torch.cuda.is_available():
            sys.exit("no GPU")
        if torch.cuda.device_count() < 2:
            raise SystemExit("two GPUs needed")
        if torch.cuda.is_available():
            pass
        else:
            print("CPU then")
        print("CUDA available:", torch.cuda.is_available())
        device = "cuda" if torch.cuda.is_available() else "cpu"
    """)
    emulate._tree.cache_clear()
    assert emulate._demands(path, _line(path, "assert torch.cuda"))
    assert emulate._demands(path, _line(path, "if not torch.cuda"))
    assert emulate._demands(path, _line(path, "device_count() < 2"))
    assert not emulate._demands(path, _line(path, "if torch.cuda.is_available():"))  # a CPU branch
    assert not emulate._demands(path, _line(path, "print("))
    assert not emulate._demands(path, _line(path, "device = "))


def test_source_written_for_cuda_and_source_that_only_prints_what_it_has(tmp_path):
    cpu = _script(tmp_path, """
        import torch, torch.distributed as dist
        print("CUDA available:", torch.cuda.is_available(), torch.cuda.device_count())
        dist.init_process_group(backend="gloo")
    """)
    gpu = tmp_path / "gpu.py"
    gpu.write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda(0)\n")
    nccl = tmp_path / "nccl.py"
    nccl.write_text("import torch.distributed as dist\ndist.init_process_group(backend='nccl')\n")
    agnostic = tmp_path / "agnostic.py"
    agnostic.write_text("import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n")
    wraps = tmp_path / "wraps.py"
    wraps.write_text("from torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(m, device_ids=[rank])\n")
    emulate._tree.cache_clear()
    assert not emulate._file_uses_cuda(cpu)
    for path in (gpu, nccl, agnostic, wraps):
        assert emulate._file_uses_cuda(str(path)), path


def _loader(samples_per_pass: list[dict[int, int]], stored: list | None = None) -> dict:
    return {"stored": stored or [], "epochs": [{"samples": {str(k): v for k, v in s.items()}} for s in samples_per_pass]}


def test_shared_indices_with_the_same_samples_are_the_same_data():
    per_rank = {0: _loader([{0: 11, 1: 12}]), 1: _loader([{0: 11, 1: 12}])}
    assert _samples.sample_verdict(per_rank, [0]) == _samples.SAME


def test_samples_that_differ_across_ranks_but_repeat_on_each_rank_are_per_rank_data():
    per_rank = {0: _loader([{0: 11, 1: 12}, {1: 12, 0: 11}]), 1: _loader([{0: 21, 1: 22}, {0: 21, 1: 22}])}
    assert _samples.sample_verdict(per_rank, [0, 1]) == _samples.PER_RANK


def test_samples_random_at_every_access_say_nothing_and_the_stored_data_decides():
    per_rank = {0: _loader([{0: 11}, {0: 13}], stored=[["dataset.files", 5]]),
                1: _loader([{0: 21}, {0: 23}], stored=[["dataset.files", 5]])}
    assert _samples.sample_verdict(per_rank, [0, 1]) == _samples.VARYING
    assert _samples.stored_verdict(per_rank) == _samples.SAME  # augmentation over the same files
    per_rank[1]["stored"] = [["dataset.files", 6]]
    assert _samples.stored_verdict(per_rank) == _samples.PER_RANK
    per_rank[1]["stored"] = []
    assert _samples.stored_verdict(per_rank) == _samples.UNKNOWN


def test_the_first_differing_parameter_in_ddps_order():
    row = ("body.weight", (16, 8), "float32", True)
    assert first_difference({0: [row], 1: [row]}) is None
    assert first_difference({0: [row, ("aux.weight", (3, 16), "float32", True)], 1: [row]}) == (1, "aux.weight")
    assert first_difference({0: [row], 1: [("body.weight", (16, 8), "float32", False)]}) == (0, "body.weight")


def _row(code: str, status: str, severity: str | None = None, explained_by: str | None = None) -> Row:
    verdict = Verdict(code, status, f"{code} detail", severity=severity)
    return Row(code, code.lower(), status, verdict, explained_by)


def test_warnings_count_as_warnings_and_skipped_checks_share_one_line():
    rows = [_row("DDP103", FAIL, "warning"), _row("DDP115", FAIL, "info"), _row("DDP105", PASS),
            _row("DDP107", SKIP), _row("DDP104", SKIP, explained_by="DDP100"), _row("DDP110", "not-run")]
    job = {"steps": 1, "checked_steps": 1, "script_exit_code": 0}
    assert results.totals(rows, job).startswith("0 failed, 1 warning, 1 advice, 1 passed, 3 skipped or not run "
                                                "(1 optimizer step, 1 checked)")
    line = results.skipped_line(rows)
    assert line == ("3 checks skipped or not run (nothing to check: DDP107; explained by DDP100: DDP104; "
                    "not selected: DDP110); --show-skipped lists them")
