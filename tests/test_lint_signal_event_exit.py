"""A training loop that returns when a `threading.Event` is set, where only a signal handler sets
it (SIGTERM on preemption, SIGUSR2, Ctrl-C): each process meets its signal at its own step, so the
rank that leaves does it alone (DDP035), through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

SIGNALS = """\
    import signal
    import threading

    STOP = threading.Event()


    def _on_signal(signum, frame):
        STOP.set()


    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGUSR2, _on_signal)


    def request_stop():
        STOP.set()
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from signals import STOP


    def train_epoch(net, optimizer, loader):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda()).backward()
            optimizer.step()
            if STOP.is_set():
                return


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        loader = torch.utils.data.DataLoader(data, sampler=torch.utils.data.DistributedSampler(data))
        for epoch in range(10):
            train_epoch(net, optimizer, loader)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _lint(tmp_path, signals: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"signals.py": signals, "train.py": TRAIN})
    return finding_set(tmp_path, "train.py", select="DDP035")


def test_an_event_only_signal_handlers_set_is_each_ranks_own(tmp_path):
    text = SIGNALS.replace("\n\n    def request_stop():\n        STOP.set()\n", "\n")
    assert _lint(tmp_path, text) == {("train.py", 16, "DDP035")}


def test_an_event_the_program_also_sets_itself_is_not_judged(tmp_path):
    # `request_stop()` may be called on every rank alike (after a collective decision).
    assert _lint(tmp_path, SIGNALS) == set()
