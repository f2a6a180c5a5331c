"""A `torch.load` in the process that starts the workers (beside `mp.spawn` in its block, or in a
function only that block calls, such as the evaluation arm of `if mode == "train": mp.spawn(...)
else: test()`) runs once, in a script no outside launcher starts: not on every rank. Through
`ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SPAWNED = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def build():
        return torch.nn.Linear(8, 8).cuda()


    def worker(rank, world_size, args):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(build(), device_ids=[rank])
        if args.resume:
            model.module.load_state_dict(torch.load(args.resume)["model"])
        for step in range(10):
            model(torch.randn(4, 8).cuda()).sum().backward()
        dist.destroy_process_group()


    def evaluate(args):
        model = build()
        model.load_state_dict(torch.load(args.weights)["model"])
        return model(torch.randn(4, 8).cuda())


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--mode", default="train")
        parser.add_argument("--resume", default="")
        parser.add_argument("--weights", default="best.pt")
        args = parser.parse_args()
        gpus = torch.cuda.device_count()
        if args.mode == "train":
            mp.spawn(worker, args=(gpus, args), nprocs=gpus)
        else:
            evaluate(args)
    """


def test_the_evaluation_arm_beside_the_spawn_loads_once_while_the_workers_load_on_every_rank(tmp_path):
    _write(tmp_path, {"main.py": SPAWNED})
    assert _findings(tmp_path, "main.py", select="DDP011") == {("main.py", 18, "DDP011")}


def test_a_load_after_the_workers_return_runs_in_the_launcher_only(tmp_path):
    text = SPAWNED.replace("        else:\n            evaluate(args)\n", "        evaluate(args)\n")
    _write(tmp_path, {"main.py": text})
    assert _findings(tmp_path, "main.py", select="DDP011") == {("main.py", 18, "DDP011")}


def test_a_script_torchrun_may_start_runs_the_same_arm_on_every_rank(tmp_path):
    # The script reads LOCAL_RANK: torchrun starts every rank at the `__main__` block, so the
    # evaluation arm is every rank's.
    text = SPAWNED.replace(
        "        gpus = torch.cuda.device_count()\n",
        "        gpus = torch.cuda.device_count()\n"
        "        if \"LOCAL_RANK\" in os.environ:\n"
        "            worker(int(os.environ[\"LOCAL_RANK\"]), int(os.environ[\"WORLD_SIZE\"]), args)\n",
    ).replace("    import argparse\n", "    import argparse\n    import os\n")
    _write(tmp_path, {"main.py": text})
    assert _findings(tmp_path, "main.py", select="DDP011") == {("main.py", 19, "DDP011"), ("main.py", 27, "DDP011")}


# A function that spawns workers which enter it again (with the device set): its code after the
# spawn branch is the workers'.
REENTERED = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run(weights, device_id=None, n_devices=None):
        if n_devices is None:
            n_devices = torch.cuda.device_count()
            if n_devices > 1:
                mp.spawn(_worker, (weights, n_devices), n_devices)
                return
        if device_id is not None:
            dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=device_id,
                                    world_size=n_devices)
            torch.cuda.set_device(device_id)
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[device_id])
        model.module.load_state_dict(torch.load(weights))


    def _worker(index, weights, n_devices):
        run(weights, device_id=index, n_devices=n_devices)


    if __name__ == "__main__":
        run("model.pt")
    """


def test_a_load_in_the_function_the_workers_enter_again_is_every_rank_s(tmp_path):
    _write(tmp_path, {"main.py": REENTERED})
    assert _findings(tmp_path, "main.py", select="DDP011") == {("main.py", 18, "DDP011")}
