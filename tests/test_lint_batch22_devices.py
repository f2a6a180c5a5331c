"""The global rank as the device (DDP007), hard-coded rendezvous (DDP015) and a missing teardown
(DDP005), on mechanisms seen on public scripts of batch 22: which functions the run reaches from
its entry (a set-up left for an `mp.spawn` the `__main__` block no longer makes), a device string
built in a variable, and the global rank handed on in an attribute named like the local rank.
Each through `ddpcheck lint` on a small project written in the style of the scripts, with clean
variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A torchrun script (the local rank from LOCAL_RANK) whose epoch helpers pick the device from the
# global rank, with a local set-up function left for an `mp.spawn` that is commented out.
LEFTOVER_SPAWN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_epoch(model, loader, optimizer):
        model.train()
        if torch.cuda.is_available():
            torch.cuda.set_device(dist.get_rank())
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl")
        model = DDP(build_model().to(device), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=read_config().lr)
        for epoch in range(10):
            train_epoch(model, make_loader(), optimizer)
        TEARDOWN


    def SETUPFN(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        main()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
        # import torch.multiprocessing as mp
        # mp.spawn(run_local, args=(2,), nprocs=2, join=True)
"""


def leftover(teardown: str = "pass", local: str = "run_local") -> dict[str, str]:
    return {"train.py": LEFTOVER_SPAWN.replace("TEARDOWN", teardown).replace("SETUPFN", local)}


def test_setup_nothing_calls_writes_no_rendezvous(tmp_path: Path) -> None:
    # The literal MASTER_ADDR/PORT are only in a function nothing calls: torchrun's values stand.
    assert lines(tmp_path, leftover(), "DDP015") == []


def test_teardown_in_a_setup_nothing_calls_does_not_count(tmp_path: Path) -> None:
    # `main` makes the group and never tears it down; only the unused set-up does.
    assert lines(tmp_path, leftover(), "DDP005") == [("train.py", 23)]


def test_teardown_in_main_is_enough(tmp_path: Path) -> None:
    assert lines(tmp_path, leftover(teardown="dist.destroy_process_group()"), "DDP005") == []


def test_loopback_in_a_setup_nothing_calls_does_not_pin_the_job_to_one_machine(tmp_path: Path) -> None:
    # The `localhost` of the unused set-up does not keep a torchrun job on one machine: the
    # global rank as the device is wrong on the second node.
    assert lines(tmp_path, leftover(), "DDP007") == [("train.py", 10)]


def test_decorated_setup_may_run(tmp_path: Path) -> None:
    # A command of a CLI framework (`@app.command()`) runs although the file never names it: its
    # writes still count.
    files = leftover(local="run_local")
    files["train.py"] = files["train.py"].replace(
        "def run_local(", "@app.command()\n    def run_local(").replace(
        "import os\n", "import os\n    import typer\n    app = typer.Typer()\n", 1)
    # (the address and port written together are one rendezvous: one finding, at the first)
    assert lines(tmp_path, files, "DDP015") == [("train.py", 35)]


# `get_device` builds the device string from the global RANK in a variable first.
DEVICE_TEXT = """\
    import os
    import torch
    import torch.distributed as dist


    def get_device(args):
        dev = args.device
        if not args.distributed:
            return torch.device(dev)
        rank = os.environ["{variable}"]
        if "cuda" in dev:
            dev = f"cuda:{{rank}}"
        device = torch.device(dev)
        return device


    def main():
        args = parse_args()
        device = get_device(args)
        if args.distributed:
            dist.init_process_group("nccl")
        model = build_model().to(device)
        train(args, model, device)
        if args.distributed:
            dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_device_string_built_from_global_rank(tmp_path: Path) -> None:
    files = {"train.py": DEVICE_TEXT.format(variable="RANK")}
    assert lines(tmp_path, files, "DDP007") == [("train.py", 12)]


def test_device_string_built_from_local_rank(tmp_path: Path) -> None:
    files = {"train.py": DEVICE_TEXT.format(variable="LOCAL_RANK")}
    assert lines(tmp_path, files, "DDP007") == []


# A set-up helper stores the global RANK in `args.local_rank`; the script and a model class of
# another module take the device from it.
RANK_IN_LOCAL_RANK = """\
    import os
    import torch
    import torch.distributed as dist
    from nets.wrapper import Trainer


    def init_distributed_mode(args):
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            args.local_rank = int(os.environ["{variable}"])
            args.world_size = int(os.environ["WORLD_SIZE"])
            args.gpu = int(os.environ["LOCAL_RANK"])
        else:
            args.distributed = False
            args.local_rank = 0
            return
        args.distributed = True
        torch.cuda.set_device(args.gpu)
        dist.init_process_group(backend="nccl", init_method="env://")


    def train(args):
        device = "cuda:{{}}".format(args.local_rank)
        trainer = Trainer(args)
        for batch in make_loader(args):
            trainer.step({{k: v.to(device) for k, v in batch.items()}})


    if __name__ == "__main__":
        args = parse_args()
        init_distributed_mode(args)
        train(args)
        dist.destroy_process_group()
"""

WRAPPER = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer(object):
        def __init__(self, args):
            self.args = args
            device = torch.device(f"cuda:{args.local_rank}")
            self.net = build_net().to(device)
            self.net = DDP(self.net, device_ids=[self.args.local_rank])

        def step(self, batch):
            loss = self.net(batch).mean()
            loss.backward()
"""


def rank_in_local_rank(variable: str, script_device: str = "args.local_rank") -> dict[str, str]:
    script = RANK_IN_LOCAL_RANK.format(variable=variable).replace("format(args.local_rank)", f"format({script_device})")
    return {"train.py": script, "nets/__init__.py": "", "nets/wrapper.py": WRAPPER}


def test_global_rank_in_local_rank_attribute(tmp_path: Path) -> None:
    # One finding for the value (its other uses as a device are counted in the message).
    assert lines(tmp_path, rank_in_local_rank("RANK"), "DDP007") == [("train.py", 22)]


def test_global_rank_in_local_rank_attribute_read_two_calls_down(tmp_path: Path) -> None:
    # The script's own device is the local rank; the model class two calls below the set-up takes
    # the global one from `args.local_rank`.
    assert lines(tmp_path, rank_in_local_rank("RANK", "args.gpu"), "DDP007") == [("wrapper.py", 8)]


def test_local_rank_in_local_rank_attribute(tmp_path: Path) -> None:
    assert lines(tmp_path, rank_in_local_rank("LOCAL_RANK"), "DDP007") == []
