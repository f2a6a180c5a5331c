"""A wrapper moved to the current CUDA device after the module was moved there by index
(`torch.cuda.current_device()`), through `ddpcheck lint` (DDP014): the second move moves nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch import cuda
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run(build, loader, use_gpu):
        dist.init_process_group("nccl")
        device = cuda.current_device()
        net = build().to(FIRST)
        model = DDP(net, device_ids=[device])
        if use_gpu:
            model = model.SECOND
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        dist.destroy_process_group()
    """


def _lint(tmp_path: Path, first: str, second: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": SCRIPT.replace("FIRST", first).replace("SECOND", second)})
    return finding_set(tmp_path, "train.py", select="DDP014")


def test_cuda_after_a_move_to_the_current_device_index_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "device", "cuda()") == set()


def test_cuda_with_the_current_index_after_a_move_there_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "device", "cuda(torch.cuda.current_device())") == set()


def test_to_the_current_index_after_cuda_is_clean(tmp_path: Path) -> None:
    assert _lint(tmp_path, "'cuda'", "to(device=device)") == set()


def test_a_cast_after_a_move_to_the_current_device_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, "device", "half()") == {("train.py", 13, "DDP014")}


def test_cuda_after_a_move_to_a_chosen_index_is_reported(tmp_path: Path) -> None:
    # `rank` may be any GPU: `.cuda()` moves to the current one, not necessarily there.
    text = SCRIPT.replace("FIRST", "dist.get_rank()").replace("SECOND", "cuda()")
    write_project(tmp_path, {"train.py": text})
    assert finding_set(tmp_path, "train.py", select="DDP014") == {("train.py", 13, "DDP014")}
