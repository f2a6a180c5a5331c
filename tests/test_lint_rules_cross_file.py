"""DDP001–DDP012 with the DDP setup in another module of the project (read, never imported)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.model import Project
from ddpcheck.lint.rules import rule_classes

MINE = {f"DDP{n:03d}" for n in range(1, 13)}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip("\n"))
    return root / "train.py"


def found(path: Path) -> set[tuple[str, int]]:
    rules = [r for r in rule_classes() if r.code in MINE]
    return {(f.code, f.line) for f in lint_source(str(path), path.read_text(), rules, Project())}


DIST_UTIL = """
import os
import torch
import torch.distributed as dist

def setup_dist():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    return local_rank

def cleanup():
    dist.destroy_process_group()

def reduce_mean(t):
    dist.all_reduce(t)
    return t / dist.get_world_size()

def save_checkpoint(state, path):
    torch.save(state, path)

def save_on_master(state, path):
    if dist.get_rank() == 0:
        torch.save(state, path)

def train_one_epoch(model, loader, epoch):
    loader.sampler.set_epoch(epoch)
    for batch in loader:
        model(batch).sum().backward()
"""


def test_setup_and_teardown_in_a_helper_module_are_seen(tmp_path):
    train = write(tmp_path, {"dist_util.py": DIST_UTIL, "train.py": """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        import dist_util

        def main():
            local_rank = dist_util.setup_dist()
            model = torch.nn.parallel.DistributedDataParallel(net.cuda(), device_ids=[local_rank])
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, sampler=sampler)
            for epoch in range(10):
                dist_util.train_one_epoch(model, loader, epoch)
                dist_util.save_on_master(model.module.state_dict(), "ckpt.pt")
            dist_util.cleanup()

        if __name__ == "__main__":
            main()
        """})
    # set_device (DDP003), destroy (DDP005), set_epoch (DDP002) and the guarded save (DDP010)
    # all happen in dist_util.py.
    assert found(train) == set()


def test_pitfalls_hidden_in_helper_calls_are_reported(tmp_path):
    train = write(tmp_path, {"dist_util.py": DIST_UTIL, "train.py": """
        import torch.distributed as dist
        from dist_util import reduce_mean, save_checkpoint, setup_dist

        def main():
            setup_dist()
            for epoch in range(10):
                loss = step()
                if dist.get_rank() == 0:
                    print(reduce_mean(loss))
                save_checkpoint({"epoch": epoch}, "ckpt.pt")

        if __name__ == "__main__":
            main()
        """})
    assert found(train) == {
        ("DDP005", 8),  # dist_util.py's init_process_group: the group it creates is never destroyed
        ("DDP009", 9),  # reduce_mean all-reduces, on rank 0 only: hang
        ("DDP010", 19),  # dist_util.py's torch.save: save_checkpoint runs on every rank
    }


def test_launcher_flag_is_fine_when_a_helper_reads_local_rank(tmp_path):
    files = {"utils.py": """
        import os
        import torch.distributed as dist

        def init_distributed_mode(args):
            args.gpu = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl")
        """}
    script = """
        import argparse
        {imports}
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        args = parser.parse_args()
        {setup}
        """
    helper = write(tmp_path, {**files, "train.py": script.format(
        imports="from utils import init_distributed_mode", setup="init_distributed_mode(args)")})
    assert ("DDP008", 4) not in found(helper)
    alone = write(tmp_path, {"train.py": script.format(imports="import torch", setup="torch.cuda.set_device(args.local_rank)")})
    assert ("DDP008", 4) in found(alone)
