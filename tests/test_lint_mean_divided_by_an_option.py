"""DDP022 through `ddpcheck lint`: a mean helper that sums over ranks and divides by what its
callers pass, followed to the callers: a command-line option that does not name the world size
(the data loader's `--workers`) is not the number of ranks."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

HELPERS = """\
import torch.distributed as dist


def mean_over_ranks(value, count):
    out = value.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    out /= count
    return out


def run_epoch(opts, model, loader, optimizer):
    for images, targets in loader:
        loss = model(images.cuda(), targets.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        shown = mean_over_ranks(loss.detach(), {divisor})
        if opts.local_rank == 0:
            print(shown.item())
"""

MAIN = """\
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from engine import run_epoch
from nets import Net, Pairs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4, help="loader processes")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    opts = parser.parse_args()
    opts.local_rank = int(os.environ["LOCAL_RANK"])
{extra}    torch.cuda.set_device(opts.local_rank)
    dist.init_process_group("nccl")
    data = Pairs()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=opts.workers)
    model = DDP(Net().cuda(), device_ids=[opts.local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(opts.epochs):
        sampler.set_epoch(epoch)
        run_epoch(opts, model, loader, optimizer)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

NETS = """\
import torch


class Net(torch.nn.Module):
    def forward(self, x, y):
        return (x - y).abs().mean()


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.zeros(3), torch.zeros(3)
"""


def _lint(tmp_path, divisor: str, extra: str = "") -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": MAIN.format(extra=extra), "engine.py": HELPERS.format(divisor=divisor),
                      "nets.py": NETS})
    return _findings(tmp_path, "train.py", select="DDP022")


def test_a_sum_divided_by_the_loader_workers_option_is_reported_at_the_reduce(tmp_path):
    assert _lint(tmp_path, "opts.workers") == {("engine.py", 6, "DDP022")}


def test_a_sum_divided_by_the_world_size_option_is_clean(tmp_path):
    # An option named for the world size may be set to it: unknown, not a finding.
    assert _lint(tmp_path, "opts.world_size") == set()


def test_a_sum_divided_by_the_world_size_is_clean(tmp_path):
    assert _lint(tmp_path, "dist.get_world_size()") == set()


def test_an_option_the_script_sets_to_the_world_size_is_clean(tmp_path):
    # The script overwrites the option after parsing: what it holds is no longer the flag.
    extra = "    opts.workers = int(os.environ['WORLD_SIZE'])\n"
    assert _lint(tmp_path, "opts.workers", extra) == set()


def test_an_option_the_namespace_is_updated_from_is_clean(tmp_path):
    # A configuration file merged into the namespace may set it to anything.
    extra = "    vars(opts).update({'workers': int(os.environ['WORLD_SIZE'])})\n"
    assert _lint(tmp_path, "opts.workers", extra) == set()


def test_an_attribute_no_parser_declares_is_clean(tmp_path):
    # `opts.count` is set somewhere the lint does not read: unknown.
    assert _lint(tmp_path, "opts.count") == set()
