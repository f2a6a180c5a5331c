"""A script that reaches its training code through a folder it puts on `sys.path` itself
(`sys.path.append('src')`, then `from train import main`) is linted with that code, also when
syntax errors are reported (the default): the prefilter that skips files no rule can fire on
finds the modules the way the lint does. Through `ddpcheck lint` on a small project."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

RUN = """\
    import sys

    sys.path.append("src")

    from train import main

    params = {"world_size": 2, "epochs": 3}

    if __name__ == "__main__":
        main(params)
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(rank, params):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=params["world_size"])
        model = DDP(torch.nn.Linear(4, 1).to(f"cuda:{rank}"), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * params["world_size"])
        for _ in range(params["epochs"]):
            optimizer.zero_grad()
            model(torch.randn(8, 4, device=f"cuda:{rank}")).sum().backward()
            optimizer.step(){teardown}


    def main(params):
        mp.spawn(worker, args=(params,), nprocs=params["world_size"])
    """


def test_code_reached_through_a_sys_path_folder_is_linted_with_the_default_codes(tmp_path):
    _write(tmp_path, {"demo/run.py": RUN, "demo/src/train.py": TRAIN.replace("{teardown}", "")})
    assert ("train.py", 12, "DDP005") in _findings(tmp_path, "demo/run.py", select="ALL")


def test_the_same_project_with_a_teardown_is_clean_of_it(tmp_path):
    teardown = "\n        dist.destroy_process_group()"
    _write(tmp_path, {"demo/run.py": RUN, "demo/src/train.py": TRAIN.replace("{teardown}", teardown)})
    assert not any(code == "DDP005" for _, _, code in _findings(tmp_path, "demo/run.py", select="ALL"))
