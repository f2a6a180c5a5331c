"""loguru's `logger` writes every record (DEBUG up) to stderr from the import on: a
`logger.debug(...)` at each training step prints on every rank unless the run changes loguru's
sinks (a file sink added on rank 0 leaves the console sink on every rank). A message that a
project helper tags with the rank is meant to come from every rank. Through `ddpcheck lint`
on a small project, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

SCRIPT = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from loguru import logger


    def train(gpu_idx, world_size, nb_epochs):
        dist.init_process_group("nccl", rank=gpu_idx, world_size=world_size)
        torch.cuda.set_device(gpu_idx)
        {setup}
        data = list(range(64))
        loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
        net = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[gpu_idx])
        solver = torch.optim.Adam(net.parameters(), lr=2e-4)
        for epoch in range(nb_epochs):
            for index, x in enumerate(loader):
                solver.zero_grad()
                loss = net(x.cuda()).mean()
                loss.backward()
                solver.step()
                logger.debug({message})
        dist.destroy_process_group()


    def tag(msg):
        return f"[R:{{dist.get_rank()}}] {{msg}}"


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(train, args=(n, 10), nprocs=n)
"""


STEP = '"[%03d] step %d loss %.4f" % (epoch, index, loss.item())'


def test_loguru_debug_in_the_step_loop_is_reported(tmp_path: Path) -> None:
    files = {"learn.py": SCRIPT.format(message=STEP, setup="pass")}
    assert lines(tmp_path, files, "DDP020", target="learn.py") == [("learn.py", 24)]


def test_loguru_sinks_removed_on_other_ranks_is_clean(tmp_path: Path) -> None:
    files = {"learn.py": SCRIPT.format(message=STEP, setup="if gpu_idx != 0:\n            logger.remove()")}
    assert lines(tmp_path, files, "DDP020", target="learn.py") == []


def test_loguru_disabled_is_clean(tmp_path: Path) -> None:
    files = {"learn.py": SCRIPT.format(message=STEP, setup='logger.disable("__main__")')}
    assert lines(tmp_path, files, "DDP020", target="learn.py") == []


def test_loguru_file_sink_on_rank_zero_only_is_still_reported(tmp_path: Path) -> None:
    files = {"learn.py": SCRIPT.format(message=STEP, setup='if gpu_idx == 0:\n            logger.add("train.log")')}
    assert lines(tmp_path, files, "DDP020", target="learn.py") == [("learn.py", 25)]


def test_message_tagged_with_the_rank_by_a_project_helper_is_clean(tmp_path: Path) -> None:
    files = {"learn.py": SCRIPT.format(message=f"tag({STEP})", setup="pass")}
    assert lines(tmp_path, files, "DDP020", target="learn.py") == []
