"""What `mp.spawn` hands its workers, through `ddpcheck lint`: the `args=` tuple kept in a
variable first reaches the worker's parameters as the inline tuple does."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

RESUME = """\
    import glob

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def load_models(rank=0, ckpt_path=None):
        model = torch.nn.Linear(2, 2)
        if ckpt_path is not None:
            model.load_state_dict(torch.load(ckpt_path)["model"])
        return model.cuda(rank)


    def train(rank, world_size, lr, ckpt_path=None):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:1234", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = torch.nn.parallel.DistributedDataParallel(load_models(rank, ckpt_path), device_ids=[rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        found = sorted(glob.glob("checkpoints/*.pth"))
        CKPT_PATH = found[-1] if found else None
        SPAWN
    """


def _lint(tmp_path: Path, spawn: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": RESUME.replace("SPAWN", spawn)})
    return finding_set(tmp_path, "train.py", select="DDP011")


def test_a_resume_path_handed_through_a_tuple_variable_reaches_the_worker(tmp_path: Path) -> None:
    spawn = "train_args = (2, 1e-3, CKPT_PATH)\n        mp.spawn(train, args=train_args, nprocs=2)"
    assert _lint(tmp_path, spawn) == {("train.py", 11, "DDP011")}


def test_a_tuple_variable_that_leaves_the_path_out_keeps_the_default(tmp_path: Path) -> None:
    # No path handed on: `ckpt_path` stays None in every worker, so the load never runs.
    spawn = "train_args = (2, 1e-3)\n        mp.spawn(train, args=train_args, nprocs=2)"
    assert _lint(tmp_path, spawn) == set()
