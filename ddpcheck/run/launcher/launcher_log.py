"""torchrun's own log lines — the OMP_NUM_THREADS banner, "Sending process ... closing signal
SIGTERM", "failed (exitcode: 1) local_rank: ..." — go to the run's log file, not the terminal:
ddpcheck's report says what happened, with the rank and the line. `--verbose` shows them too.

They come from the `torch.distributed` loggers of the launcher process (the elastic agent runs
here); the ranks' own output is the user's and is never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from typing import Iterator

LOGGER = "torch.distributed"
NAME = "torchrun.log"


def path(record_dir: str) -> str:
    return os.path.join(record_dir, NAME)


@contextlib.contextmanager
def captured(record_dir: str, verbose: bool = False) -> Iterator[None]:
    """While the job runs, torch.distributed's records go to `<record_dir>/torchrun.log` (and, with
    `verbose`, on to the terminal as before)."""
    logger = logging.getLogger(LOGGER)
    if not record_dir:
        yield
        return
    handler = logging.FileHandler(path(record_dir), encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s"))
    # torch's logging set-up gives "torch.distributed" a stderr handler of its own (and no
    # propagation): set it aside for the length of the job.
    terminal = [] if verbose else list(logger.handlers)
    for other in terminal:
        logger.removeHandler(other)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for other in terminal:
            logger.addHandler(other)
        handler.close()


def keep(record_dir: str) -> str | None:
    """Copy the run's torchrun log out of the record directory (which is removed after the run);
    its path, or None when torchrun logged nothing."""
    source = path(record_dir)
    if not os.path.exists(source) or os.path.getsize(source) == 0:
        return None
    fd, target = tempfile.mkstemp(prefix="ddpcheck-torchrun-", suffix=".log")
    os.close(fd)
    shutil.copyfile(source, target)
    return target
