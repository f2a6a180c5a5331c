"""A `destroy_process_group` that only a signal handler runs is no teardown of a normal run
(DDP005). Through `ddpcheck lint` on small projects in tmp_path."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

SCRIPT = """\
import signal
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def on_signal(sig, frame):
    dist.destroy_process_group()
    sys.exit(0)


class Trainer:
    def __init__(self):
        signal.signal(signal.SIGTERM, self.shutdown)

    def shutdown(self, sig, frame):
        dist.destroy_process_group()


def main():
    dist.init_process_group("gloo")
    {install}
    model = DDP(torch.nn.Linear(4, 4))
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
    {end}


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("install", ["signal.signal(signal.SIGINT, on_signal)", "trainer = Trainer()"])
def test_a_teardown_only_a_signal_handler_runs_is_reported(tmp_path, install):
    write_project(tmp_path, {"train.py": SCRIPT.format(install=install, end="pass")})
    assert finding_set(tmp_path, "train.py", select="DDP005") == {("train.py", 22, "DDP005")}


@pytest.mark.parametrize("end", ["dist.destroy_process_group()", "on_signal(None, None)"])
def test_a_teardown_at_the_end_of_the_run_is_clean(tmp_path, end):
    write_project(tmp_path, {"train.py": SCRIPT.format(install="signal.signal(signal.SIGINT, on_signal)", end=end)})
    assert finding_set(tmp_path, "train.py", select="DDP005") == set()
