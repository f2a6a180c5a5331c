"""A run whose process-group set-up is picked by name from a helper module (`getattr(dist_utils,
"init_dist_%s" % args.launcher)(...)`): the call may run any function of that module the
spelling names. DDP005 reports a set-up never torn down once, and DDP015 the set-up that meets
at a host written in the code when torch.distributed.launch starts the script (`--local_rank`).
Through `ddpcheck lint`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


DIST_UTILS = """\
    import os
    import subprocess

    import torch
    import torch.distributed as dist


    def init_dist_slurm(port, local_rank, backend="nccl"):
        proc = int(os.environ["SLURM_PROCID"])
        torch.cuda.set_device(proc % torch.cuda.device_count())
        os.environ["MASTER_ADDR"] = subprocess.getoutput("scontrol show hostname | head -n1")
        os.environ["MASTER_PORT"] = str(port)
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["RANK"] = str(proc)
        dist.init_process_group(backend=backend)
        return dist.get_world_size(), dist.get_rank()


    def init_dist_pytorch(port, local_rank, backend="nccl"):
        gpus = torch.cuda.device_count()
        torch.cuda.set_device(local_rank % gpus)
        dist.init_process_group(backend=backend, init_method={url}, rank=local_rank, world_size=gpus)
        return gpus, dist.get_rank()
"""

TRAIN = """\
    import argparse

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tools import dist_utils


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--launcher", choices=["none", "pytorch", "slurm"], default="none")
        parser.add_argument("--tcp_port", type=int, default=18888)
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--dist_url", type=str, default="tcp://127.0.0.1:23456")
        args = parser.parse_args()
        if args.launcher == "none":
            gpus, rank = 1, 0
        else:
            gpus, rank = getattr(dist_utils, "init_dist_%s" % args.launcher)(args.tcp_port, args.local_rank)
        net = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[torch.cuda.current_device()])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for step in range(100):
            loss = net(torch.randn(4, 8).cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step(){teardown}


    if __name__ == "__main__":
        main()
"""


def _files(url: str, teardown: str = "") -> dict[str, str]:
    return {"train.py": TRAIN.replace("{teardown}", teardown), "tools/__init__.py": "",
            "tools/dist_utils.py": DIST_UTILS.replace("{url}", url)}


def test_setup_picked_by_name_and_never_torn_down_is_reported_once(tmp_path: Path) -> None:
    # Both set-ups are reachable through the one call: one finding, at the first of them.
    files = _files('"env://"')
    assert lines(tmp_path, files, "DDP005") == [("dist_utils.py", 22)]


def test_setup_picked_by_name_then_torn_down_is_clean(tmp_path: Path) -> None:
    teardown = "\n        torch.distributed.destroy_process_group()"
    assert lines(tmp_path, _files('"env://"', teardown), "DDP005") == []


def test_host_written_in_a_launched_script_helper_is_reported(tmp_path: Path) -> None:
    files = _files('"tcp://127.0.0.1:%d" % port')
    assert lines(tmp_path, files, "DDP015") == [("dist_utils.py", 22)]


def test_host_in_an_f_string_is_reported(tmp_path: Path) -> None:
    files = _files('f"tcp://localhost:{port}"')
    assert lines(tmp_path, files, "DDP015") == [("dist_utils.py", 22)]


def test_env_rendezvous_in_a_launched_script_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _files('"env://"'), "DDP015") == []


def test_url_from_a_parameter_is_the_users_to_set(tmp_path: Path) -> None:
    # The URL comes from the caller (a flag): not a host the code hard-codes.
    files = _files("os.environ.get('DIST_URL', 'env://')")
    assert lines(tmp_path, files, "DDP015") == []


def test_script_without_the_launch_flag_is_not_read_as_launched(tmp_path: Path) -> None:
    files = _files('"tcp://127.0.0.1:%d" % port')
    files["train.py"] = files["train.py"].replace(
        '        parser.add_argument("--local_rank", type=int, default=0)\n', "").replace(
        "args.local_rank)", "0)")
    assert lines(tmp_path, files, "DDP015") == []


def test_name_spelled_from_an_option_without_choices_stays_unknown(tmp_path: Path) -> None:
    # `--launcher` may be anything: which function runs is not known, and nothing is reported.
    files = _files('"tcp://127.0.0.1:%d" % port')
    files["train.py"] = files["train.py"].replace('choices=["none", "pytorch", "slurm"], ', "")
    assert lines(tmp_path, files, "DDP005") == []
    assert lines(tmp_path, files, "DDP015") == []
