"""A `destroy_process_group` that runs only in a signal handler, through `ddpcheck lint`: a run
that ends normally never reaches it, so the missing teardown is still reported; a handler that
the normal end of training also calls tears down on every run."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _findings(findings: list[dict], code: str) -> list[tuple[int, str]]:
    return sorted((f["location"]["line"], f["message"]) for f in findings if f["code"] == code)


SIGNAL_TRAIN = """\
    import os
    import signal

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def setup(rank, world_size, port):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = port
        dist.init_process_group("nccl", rank=rank, world_size=world_size)


    def on_interrupt(sig, frame):
        dist.destroy_process_group()


    def train_gpu(rank, world_size, epochs):
        signal.signal(signal.SIGINT, on_interrupt)
        signal.signal(signal.SIGTERM, on_interrupt)
        setup(rank, world_size, "12355")
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[rank])
        for epoch in range(epochs):
            model(torch.randn(2, 4, device=rank)).sum().backward()


    if __name__ == "__main__":
        mp.spawn(train_gpu, args=(2, 10), nprocs=2)
"""


def test_teardown_only_on_a_signal_is_reported(tmp_path: Path) -> None:
    found = _findings(lint_project(tmp_path, {"train.py": SIGNAL_TRAIN}, "train.py", select="DDP005"), "DDP005")
    assert [line for line, _ in found] == [13]
    # The handler imported by name from the signal module.
    named = SIGNAL_TRAIN.replace("import signal\n", "from signal import SIGINT, SIGTERM, signal\n").replace(
        "signal.signal(signal.SIGINT, on_interrupt)", "signal(SIGINT, on_interrupt)").replace(
        "signal.signal(signal.SIGTERM, on_interrupt)", "signal(SIGTERM, on_interrupt)")
    found = _findings(lint_project(tmp_path, {"train.py": named}, "train.py", select="DDP005"), "DDP005")
    assert [line for line, _ in found] == [13]


def test_a_handler_also_called_at_the_end_tears_down(tmp_path: Path) -> None:
    called = SIGNAL_TRAIN.replace(
        "            model(torch.randn(2, 4, device=rank)).sum().backward()\n",
        "            model(torch.randn(2, 4, device=rank)).sum().backward()\n        on_interrupt(None, None)\n")
    found = _findings(lint_project(tmp_path, {"train.py": called}, "train.py", select="DDP005"), "DDP005")
    assert found == []
    # A teardown at the end of training besides the handler's.
    both = SIGNAL_TRAIN.replace(
        "            model(torch.randn(2, 4, device=rank)).sum().backward()\n",
        "            model(torch.randn(2, 4, device=rank)).sum().backward()\n        dist.destroy_process_group()\n")
    found = _findings(lint_project(tmp_path, {"train.py": both}, "train.py", select="DDP005"), "DDP005")
    assert found == []
