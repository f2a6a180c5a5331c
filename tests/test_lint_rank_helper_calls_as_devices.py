"""The global rank read through a project helper (`def distributed_rank(): return
dist.get_rank()`) and used as the CUDA device at several calls of it, through `ddpcheck lint`
(DDP007): each call is a read of its own — the helper also seeds and picks the main process —
so each call used as a device is reported where it is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

UTILS = """\
    import torch.distributed as dist


    def HELPER():
        if not (dist.is_available() and dist.is_initialized()):
            return 0
        return dist.get_rank()


    def is_main_process():
        return HELPER() == 0
    """

BUILD = """\
    import torch

    from utils import HELPER


    def build_model(cfg, net):
        if cfg["device"] == "cuda":
            net.to(device=torch.device(cfg["device"], HELPER()))
        return net
    """

TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from build import build_model
    from utils import HELPER, is_main_process


    def main(cfg, net, loader):
        dist.init_process_group("nccl")
        torch.cuda.set_device(HELPER())
        torch.manual_seed(cfg["seed"] + HELPER())
        model = build_model(cfg, net)
        model = DDP(model, device_ids=[HELPER()])
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if is_main_process():
            print("done")
        dist.destroy_process_group()
    """


def _lint(tmp_path: Path, helper: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {name: text.replace("HELPER", helper) for name, text in
                             (("utils.py", UTILS), ("build.py", BUILD), ("train.py", TRAIN))})
    return finding_set(tmp_path, "train.py", select="DDP007")


def test_each_call_of_a_rank_helper_used_as_a_device_is_reported(tmp_path: Path) -> None:
    assert _lint(tmp_path, "distributed_rank") == {
        ("train.py", 11, "DDP007"), ("build.py", 8, "DDP007"), ("train.py", 14, "DDP007")}


def test_a_device_helper_is_reported_once(tmp_path: Path) -> None:
    # `get_device()` hands back a device: the fix is in the helper, one finding for all its uses.
    assert len(_lint(tmp_path, "get_device")) == 1


def test_a_rank_helper_modulo_the_local_gpus_is_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {
        "utils.py": UTILS.replace("return dist.get_rank()", "return dist.get_rank() % torch.cuda.device_count()")
        .replace("import torch.distributed as dist", "import torch\nimport torch.distributed as dist")
        .replace("HELPER", "distributed_rank"),
        "build.py": BUILD.replace("HELPER", "distributed_rank"),
        "train.py": TRAIN.replace("HELPER", "distributed_rank"),
    })
    assert finding_set(tmp_path, "train.py", select="DDP007") == set()


def test_a_cpu_device_with_the_rank_as_index_is_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {
        "utils.py": UTILS.replace("HELPER", "distributed_rank"),
        "build.py": BUILD.replace("HELPER", "distributed_rank").replace('cfg["device"], distributed', '"cpu", distributed'),
        "train.py": TRAIN.replace("HELPER", "distributed_rank").replace("torch.cuda.set_device(distributed_rank())", "torch.cuda.set_device(0)")
        .replace("device_ids=[distributed_rank()]", "device_ids=None"),
    })
    assert finding_set(tmp_path, "train.py", select="DDP007") == set()


ENV = """\
    import os

    import torch
    import torch.distributed as dist

    RANK = int(os.environ.get("RANK", -1))
    WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))


    def setup(seed):
        torch.manual_seed(seed)
        torch.cuda.set_device(RANK)
        dist.init_process_group("nccl", rank=RANK, world_size=WORLD_SIZE)
    """

RUN = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from env import RANK, WORLD_SIZE, setup


    def main(net, loader):
        setup(seed=1234 + RANK)
        if WORLD_SIZE > 1:
            net.to(f"cuda:{RANK}")
            net = DDP(net, device_ids=[RANK], output_device=RANK)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    """


def test_a_global_rank_imported_by_another_module_is_reported_in_each_module(tmp_path: Path) -> None:
    # The imported value is the global rank (right for the process group and the seed): the
    # module that reads it and the one that imports it each make it a device, each a fix.
    write_project(tmp_path, {"env.py": ENV, "run.py": RUN})
    assert finding_set(tmp_path, "run.py", select="DDP007") == {("env.py", 12, "DDP007"), ("run.py", 10, "DDP007")}


def test_one_module_using_the_rank_in_several_places_is_reported_once(tmp_path: Path) -> None:
    write_project(tmp_path, {"env.py": ENV.replace("torch.cuda.set_device(RANK)", "torch.cuda.set_device(0)"),
                             "run.py": RUN})
    assert finding_set(tmp_path, "run.py", select="DDP007") == {("run.py", 10, "DDP007")}
