"""Output on every rank (DDP020), on mechanisms seen on public scripts of batch 25: each through
`ddpcheck lint` on a small project written in the style of the scripts, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A module-level logger that nothing in the project ever configures: the root logger keeps its
# default level (WARNING), so `logger.info` prints nothing on any rank, while `print` does.
TRAIN = """\
    import os
    from logging import getLogger

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    {setup}
    logger = getLogger()


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank % torch.cuda.device_count())
        model = DDP(torch.nn.Linear(8, 1).cuda())
        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            logger.info(f"Start training epoch: {{epoch}}")
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
            {last}
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _files(setup: str = "", last: str = "pass") -> dict[str, str]:
    return {"train.py": TRAIN.format(setup=setup, last=last)}


def test_info_on_a_logger_nobody_configures_is_silent(tmp_path: Path) -> None:
    assert lines(tmp_path, _files(), "DDP020") == []


def test_print_beside_an_unconfigured_logger_is_still_reported(tmp_path: Path) -> None:
    files = _files(last='print(f"epoch {epoch} loss {loss.item():.3f}")')
    assert lines(tmp_path, files, "DDP020") == [("train.py", 30)]


def test_warning_on_an_unconfigured_logger_is_reported(tmp_path: Path) -> None:
    # `lastResort` prints WARNING and above on every rank.
    files = _files(last='logger.warning(f"epoch {epoch} done")')
    assert lines(tmp_path, files, "DDP020") == [("train.py", 30)]


def test_info_with_basic_config_is_reported(tmp_path: Path) -> None:
    files = _files(setup="import logging; logging.basicConfig(level=logging.INFO)")
    assert lines(tmp_path, files, "DDP020") == [("train.py", 24)]


def test_info_with_a_handler_added_in_a_helper_module_is_reported(tmp_path: Path) -> None:
    files = _files(setup="import log_setup")
    files["log_setup.py"] = ("import logging\nimport sys\n\n"
                             "logging.getLogger().addHandler(logging.StreamHandler(sys.stdout))\n"
                             "logging.getLogger().setLevel(logging.INFO)\n")
    assert lines(tmp_path, files, "DDP020") == [("train.py", 24)]


# A step loop that stops the job on a non-finite loss, then prints every few steps: the print runs
# while the data is sound, on every rank; a message under the anomaly test itself stays silent.
STEPS = """\
    import math
    import os
    import sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank % torch.cuda.device_count())
        model = DDP(torch.nn.Linear(8, 1).cuda())
        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            loss_value = loss.item()
            if {test}:
                print(f"Loss is {{loss_value}}, stopping training")
                sys.exit(1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 50 == 0:
                print(f"step {{step}}: loss = {{loss_value}}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_print_after_an_exit_on_a_non_finite_loss_is_reported(tmp_path: Path) -> None:
    files = {"train.py": STEPS.format(test="not math.isfinite(loss_value)")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 29)]


def test_print_after_an_exit_on_a_nan_loss_is_reported(tmp_path: Path) -> None:
    files = {"train.py": STEPS.format(test="torch.isnan(loss).any()")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 29)]
