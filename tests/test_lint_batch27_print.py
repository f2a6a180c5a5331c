"""Output on every rank (DDP020) and loops left by one rank (DDP035), on mechanisms seen on public
scripts of batch 27: each through `ddpcheck lint` on a small project written in the style of the
scripts, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A project print helper imported under the name `print`: the script's `print(...)` calls run it.
DIST_UTILS = """\
    import functools

    import torch.distributed as dist


    def get_rank():
        return dist.get_rank() if dist.is_initialized() else 0


    def master_only(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if get_rank() == 0:
                return func(*args, **kwargs)
            return None
        return wrapper


    @master_only
    def master_only_print(*args):
        print(*args)


    def print_everywhere(*args):
        print(*args)
"""

GAN_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from utils.distributed import {helper} as print


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 8))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        net = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        opt = torch.optim.Adam(net.parameters())
        for epoch in range(10):
            print("Epoch {{}} ...".format(epoch))
            sampler.set_epoch(epoch)
            for (x,) in loader:
                loss = net(x.cuda()).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _gan(helper: str) -> dict[str, str]:
    return {"train.py": GAN_SCRIPT.format(helper=helper), "utils/__init__.py": "",
            "utils/distributed.py": DIST_UTILS}


def test_print_imported_as_a_rank_zero_helper_stays_silent(tmp_path: Path) -> None:
    assert lines(tmp_path / "zero", _gan("master_only_print"), "DDP020") == []
    # The name is followed into the helper: one that prints on every rank is reported where the
    # loop calls it, the place for the guard.
    assert lines(tmp_path / "every", _gan("print_everywhere"), "DDP020") == [("train.py", 20)]
    # An installed package's print writes to the console like the builtin.
    files = {"train.py": GAN_SCRIPT.format(helper="print").replace("from utils.distributed import", "from rich import")}
    assert lines(tmp_path / "rich", files, "DDP020") == [("train.py", 20)]


# Per-batch prints that name the rank's own GPU (`torch.device(f"cuda:{rank}")`, passed in).
VIT_SCRIPT = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def train_epoch(model, loader, opt, device):
        for b, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            print({message})


    def train(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        device = {device}
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        model = DDP(torch.nn.Linear(8, 4).to(device), device_ids=[rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(5):
            sampler.set_epoch(epoch)
            train_epoch(model, loader, opt, device)
        dist.destroy_process_group()


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(train, args=(world_size,), nprocs=world_size)
"""

_GPU_MESSAGE = '"GPU ", device, " Batch ", b, " loss = ", loss.item()'


def test_print_naming_the_rank_device_passed_in_stays_silent(tmp_path: Path) -> None:
    files = {"train.py": VIT_SCRIPT.format(message=_GPU_MESSAGE, device='torch.device(f"cuda:{rank}")')}
    assert lines(tmp_path / "rank", files, "DDP020") == []
    # A device every rank names alike, or a message without the device, tells no rank apart.
    files = {"train.py": VIT_SCRIPT.format(message=_GPU_MESSAGE, device='torch.device("cuda")')}
    assert lines(tmp_path / "shared", files, "DDP020") == [("train.py", 15)]
    files = {"train.py": VIT_SCRIPT.format(message='"Batch ", b, " loss = ", loss.item()',
                                           device='torch.device(f"cuda:{rank}")')}
    assert lines(tmp_path / "plain", files, "DDP020") == [("train.py", 15)]


def test_print_naming_a_device_string_built_from_the_rank_stays_silent(tmp_path: Path) -> None:
    files = {"train.py": VIT_SCRIPT.format(message='f"GPU {device} batch {b}: {loss.item():.3f}"',
                                           device='"cuda:" + str(rank)')}
    assert lines(tmp_path, files, "DDP020") == []


# A debug probe that returns early unless it is enabled and on the main rank.
PROBE_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def is_main(rank):
        return rank == 0


    def debug_probe(enabled, rank, label, tensor=None):
        if {early}:
            return
        torch.cuda.synchronize()
        msg = f"[PROBE] {{label}}"
        if tensor is not None:
            msg += f" shape={{tuple(tensor.shape)}}"
        print(msg, flush=True)


    def main():
        rank = int(os.environ["SLURM_PROCID"])
        dist.init_process_group("nccl", rank=rank, world_size=int(os.environ["SLURM_NTASKS"]))
        torch.cuda.set_device(0)
        model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[0])
        opt = torch.optim.AdamW(model.parameters())
        probe = os.environ.get("DEBUG_PROBE") == "1"
        for epoch in range(3):
            for step in range(100):
                x = torch.randn(16, 8).cuda()
                debug_probe(probe, rank, "batch_on_device", x)
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_output_past_an_early_return_off_the_main_rank_stays_silent(tmp_path: Path) -> None:
    files = {"train.py": PROBE_SCRIPT.format(early="not enabled or not is_main(rank)")}
    assert lines(tmp_path / "main", files, "DDP020") == []
    # Past `if not enabled: return` alone, every rank prints.
    files = {"train.py": PROBE_SCRIPT.format(early="not enabled")}
    assert lines(tmp_path / "flag", files, "DDP020") == [("train.py", 32)]


def test_output_past_an_early_return_on_rank_zero_or_a_flag_stays_silent(tmp_path: Path) -> None:
    files = {"train.py": PROBE_SCRIPT.format(early="rank != 0 or not enabled")}
    assert lines(tmp_path, files, "DDP020") == []


# A retry loop around a mixed-precision step: it ends when the step was taken, or when the rank's
# own loss is not finite.
RETRY_TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.cuda.amp import GradScaler, autocast
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, net, local_rank):
            self.net = DDP(net.cuda(), device_ids=[local_rank])
            self.opt = torch.optim.Adam(self.net.parameters())
            self.scaler = GradScaler()
            self.last_step_count = 0

        def update(self, data):
            {flag} = {start}
            while {loop}:
                with autocast():
                    total_loss = self.net(data).mean()
                self.opt.zero_grad(set_to_none=True)
                self.scaler.scale(total_loss).backward()
                self.scaler.step(self.opt)
                self.scaler.update()
                if self.last_step_count == self.opt._step_count:
                    print("overflow")
                    if {test}:
                        {flag} = {end}
                else:
                    self.last_step_count = self.opt._step_count
                    {flag} = {end}
"""

RETRY_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from trainer import Trainer


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        trainer = Trainer(torch.nn.Linear(8, 8), local_rank)
        for step in range(1000):
            trainer.update(torch.randn(4, 8).cuda())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _retry(test: str, flag: str = "update_finished", start: str = "False", end: str = "True",
           loop: str = "not update_finished") -> dict[str, str]:
    return {"train.py": RETRY_SCRIPT,
            "trainer.py": RETRY_TRAINER.format(flag=flag, start=start, end=end, loop=loop, test=test)}


def test_retry_loop_left_on_the_ranks_own_loss_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path / "own", _retry("not torch.isfinite(total_loss)"), "DDP035") == [("trainer.py", 26)]
    # Left on a count every rank shares: together.
    assert lines(tmp_path / "count", _retry("self.opt._step_count > 100"), "DDP035") == []
    # The flag is all-reduced in the loop before it is read: every rank sees the same answer.
    files = _retry("bad.item() > 0")
    files["trainer.py"] = files["trainer.py"].replace(
        '                    print("overflow")\n',
        '                    print("overflow")\n'
        '                    bad = (~torch.isfinite(total_loss)).float()\n'
        '                    dist.all_reduce(bad)\n')
    assert lines(tmp_path / "agreed", files, "DDP035") == []


def test_running_flag_cleared_on_the_ranks_own_loss_is_reported(tmp_path: Path) -> None:
    files = _retry("total_loss.item() != total_loss.item()", flag="running", start="True", end="False",
                   loop="running")
    assert lines(tmp_path, files, "DDP035") == [("trainer.py", 26)]
