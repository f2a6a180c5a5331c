"""Logging set up by rank (DDP020), a package installed from a subfolder of the repository
(DDP005), on mechanisms seen on public scripts of batch 20: each through `ddpcheck lint` on a
small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, target, select=select))


# A console handler added to the root logger on every rank, a file handler on rank 0 only: the
# console still shows every rank's records.
LOG_UTIL = """\
    import logging
    import os


    def set_stream_logger(log_level=logging.DEBUG):
        import colorlog
        sh = {console}
        sh.setLevel(log_level)
        sh.setFormatter(colorlog.ColoredFormatter("%(asctime)s %(log_color)s%(levelname)s%(reset)s %(message)s"))
        logging.root.addHandler(sh)


    def set_file_logger(work_dir, log_level=logging.DEBUG):
        fh = logging.FileHandler(os.path.join(work_dir, "log-ing"))
        fh.setLevel(log_level)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logging.root.addHandler(fh)
"""

LOG_SCRIPT = """\
    import argparse
    import logging
    import time
    import torch
    import torch.distributed as dist
    from util import set_stream_logger, set_file_logger


    def parse_option():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--save_folder", type=str, default="save")
        opt = parser.parse_args()
        logging.root.setLevel(logging.INFO)
        {stream_setup}
        if opt.local_rank == 0:
            set_file_logger(work_dir=opt.save_folder, log_level=logging.DEBUG)
        return opt


    def train(loader, model, optimizer, epoch):
        for idx, (images, labels) in enumerate(loader):
            loss = model(images.cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (idx + 1) % 10 == 0:
                logging.info("Train: [{{0}}][{{1}}] loss {{2:.3f}}".format(epoch, idx + 1, loss.item()))


    def main():
        opt = parse_option()
        torch.cuda.set_device(opt.local_rank)
        dist.init_process_group(backend="nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[opt.local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
        for epoch in range(1, 11):
            time1 = time.time()
            train(loader, model, optimizer, epoch)
            time2 = time.time()
            logging.info("epoch {{}}, total time {{:.2f}}".format(epoch, time2 - time1))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_console_handler_on_every_rank_beside_a_rank_zero_file_handler(tmp_path: Path) -> None:
    files = {"util.py": LOG_UTIL.format(console="colorlog.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(stream_setup="set_stream_logger(logging.DEBUG)")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 28), ("train.py", 42)]


def test_console_handler_on_rank_zero_only_is_clean(tmp_path: Path) -> None:
    # The console handler itself is added on rank 0 only: the other ranks print nothing.
    files = {"util.py": LOG_UTIL.format(console="colorlog.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(stream_setup="if opt.local_rank == 0:\n            set_stream_logger()")}
    assert lines(tmp_path, files, "DDP020") == []


def test_file_handler_on_rank_zero_and_no_console_handler_is_clean(tmp_path: Path) -> None:
    # Only a file handler, on rank 0: the records of the other ranks go nowhere.
    files = {"util.py": LOG_UTIL.format(console="colorlog.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(stream_setup="pass")}
    assert lines(tmp_path, files, "DDP020") == []


def test_rank_zero_level_beside_a_console_handler_is_clean(tmp_path: Path) -> None:
    # The level is set by rank (WARNING on the others): that silences the console too.
    files = {"util.py": LOG_UTIL.format(console="logging.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(
                 stream_setup="set_stream_logger(logging.DEBUG)\n"
                              "        if opt.local_rank != 0:\n            logging.root.setLevel(logging.WARNING)")}
    assert lines(tmp_path, files, "DDP020") == []
