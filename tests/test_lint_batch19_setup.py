"""Set-up mechanisms seen on public scripts of batch 19 (optimizers, launchers, devices): each
through `ddpcheck lint` on a small project written in the style of the scripts, with a variant
that must stay as it is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return [f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select)]


# A benchmark that times backward passes under a communication hook: the optimizer is built out
# of habit and never stepped.
TIMED_BACKWARD = """\
    import argparse
    import torch
    import torch.optim as optim
    import torch.distributed as dist
    from torchvision.models import resnet18

    def timed_phase(args, bsize):
        torch.cuda.set_device(args.local_rank)
        model = resnet18().to(args.local_rank)
        criterion = torch.nn.CrossEntropyLoss()
        optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
        data = torch.randn((bsize, 3, 32, 32))
        target = torch.randint(0, 9, [bsize])
        for step in range(100):
            loss = criterion(model(data), target)
            loss.backward(){step}

    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("nccl", init_method="env://")
        timed_phase(args, 64)
"""


def test_optimizer_never_stepped_has_no_rate_to_scale(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": TIMED_BACKWARD.format(step="")}, "DDP004") == []


def test_optimizer_stepped_keeps_its_finding(tmp_path: Path) -> None:
    code = TIMED_BACKWARD.format(step="\n            optimizer.step()")
    assert lines(tmp_path, {"train.py": code}, "DDP004") == [11]


# A torchrun script that keeps an old `--local_rank` flag: the device comes from the rank, the
# flag is only reset before a copy of the namespace goes to the test run.
UNUSED_LOCAL_RANK_FLAG = """\
    import argparse
    import torch
    import torch.distributed as dist
    from exp import Exp

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--local_rank", type=int, default=-1, help="local rank passed from distributed launcher")

    if __name__ == "__main__":
        args = parser.parse_args()
        dist.init_process_group(backend="nccl")
        rank = dist.get_rank()
        torch.cuda.set_device({device})
        exp = Exp(args)
        exp.train()
        dist.destroy_process_group()
        if rank == 0:
            args_test = argparse.Namespace(**vars(args))
            args_test.local_rank = -1
            args.local_rank = -1
            Exp(args_test).test()
"""

EXP = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Exp:
        def __init__(self, args):
            self.args = args
            self.model = DDP(torch.nn.Linear(4, 4).cuda())

        def train(self):
            opt = torch.optim.Adam(self.model.parameters(), lr=self.args.lr)

        def test(self):
            pass
"""


def test_local_rank_flag_only_reset_and_copied_is_not_read(tmp_path: Path) -> None:
    files = {"train.py": UNUSED_LOCAL_RANK_FLAG.format(device="rank % torch.cuda.device_count()"), "exp.py": EXP}
    assert lines(tmp_path, files, "DDP008") == []


def test_local_rank_flag_read_for_the_device_is_reported(tmp_path: Path) -> None:
    files = {"train.py": UNUSED_LOCAL_RANK_FLAG.format(device="args.local_rank"), "exp.py": EXP}
    assert lines(tmp_path, files, "DDP008") == [8]


# A trainer class that picks the GPU from the rank it is given and hands DDP a list kept in a
# local name; the script started by torchrun passes it the global rank.
RANKED_TRAINER = """\
    import os
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Trainer:
        def __init__(self, config, rank=0, world_size=1):
            self.rank = rank
            local_rank = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
            torch.cuda.set_device(local_rank)
            self.model = torch.nn.Linear(4, 4).to(f"cuda:{local_rank}")
            if world_size > 1:
                device_ids = [rank] if torch.cuda.is_available() else None
                self.model = DDP(self.model, device_ids=device_ids)
"""

RANKED_SCRIPT = """\
    import os
    import torch.distributed as dist
    from trainer import Trainer

    def main():
        rank = int(os.environ["{variable}"])
        world_size = int(os.environ["WORLD_SIZE"])
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        trainer = Trainer({{}}, rank=rank, world_size=world_size)
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
"""


def test_device_ids_list_in_a_local_name_from_the_global_rank(tmp_path: Path) -> None:
    files = {"train.py": RANKED_SCRIPT.format(variable="RANK"), "trainer.py": RANKED_TRAINER}
    found = lint_project(tmp_path, files, "train.py", select="DDP007")
    assert [(Path(f["path"]).name, f["location"]["line"]) for f in found] == [("trainer.py", 12)]


def test_device_ids_list_in_a_local_name_from_the_local_rank(tmp_path: Path) -> None:
    files = {"train.py": RANKED_SCRIPT.format(variable="LOCAL_RANK"), "trainer.py": RANKED_TRAINER}
    assert lines(tmp_path, files, "DDP007") == []


# An mp.spawn script that leaves a one-GPU setting at the top and numbers its GPUs by rank.
SPAWNED_GAN = """\
    import os
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"

    import torch
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    def setup(rank, world_size):
        torch.distributed.init_process_group("nccl", rank=rank, world_size=world_size,
                                             init_method="tcp://127.0.0.1:12355")

    def main_worker(rank, world_size):
        setup(rank, world_size)
        generator = {move}
        generator = DDP(generator{ids})
        Tensor = torch.cuda.FloatTensor
        torch.distributed.destroy_process_group()

    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(main_worker, nprocs=world_size, args=(world_size,), join=True)
"""


def test_one_literal_gpu_does_not_pin_a_script_numbering_gpus_by_rank(tmp_path: Path) -> None:
    code = SPAWNED_GAN.format(move="torch.nn.Linear(4, 4).to(rank)", ids=", device_ids=[rank]")
    assert lines(tmp_path, {"train.py": code}, "DDP003") == [9]


def test_one_literal_gpu_pins_a_script_that_uses_the_current_device(tmp_path: Path) -> None:
    code = SPAWNED_GAN.format(move="torch.nn.Linear(4, 4).cuda()", ids="")
    assert lines(tmp_path, {"train.py": code}, "DDP003") == []


def test_per_process_visible_devices_still_pins(tmp_path: Path) -> None:
    code = SPAWNED_GAN.format(move="torch.nn.Linear(4, 4).to(rank)", ids=", device_ids=[rank]").replace(
        'os.environ["CUDA_VISIBLE_DEVICES"] = "1"', "import sys").replace(
        "        setup(rank, world_size)\n", '        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)\n'
                                             "        setup(rank, world_size)\n")
    assert lines(tmp_path, {"train.py": code}, "DDP003") == []
