"""DDP014 and apex: a builder that wraps the network in DDP only when mixed precision is off
(`if not cfg.half: model = DDP(model)`) never hands the wrap to the caller's `amp.initialize`
under `if cfg.half:` — the builder's test, read in the caller's terms (its parameter is the
caller's `cfg`), contradicts the caller's. Through `ddpcheck lint` on a small project."""

from __future__ import annotations

import pytest

from tests.helpers import finding_set, write_project

BUILDER = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def build_trainer(cfg):
    net = torch.nn.Linear(16, 4)
    net.opt = torch.optim.SGD(net.parameters(), lr=0.1)
    if cfg.train and WRAP_TEST:
        net.to(torch.device("cuda", cfg.rank))
        net = DDP(net, device_ids=[cfg.rank])
    return net
"""

TRAIN = """\
import argparse

import torch.distributed as dist

from nets.builder import build_trainer


def main(cfg):
    dist.init_process_group("nccl", rank=cfg.rank, world_size=cfg.world_size)
    CALL
    if cfg.half:
        from apex import amp
        net, opt = amp.initialize(net, net.opt, opt_level="O1")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--half", action="store_true")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world_size", type=int, default=1)
    main(parser.parse_args())
"""


def _found(tmp_path, wrap_test, call="net = build_trainer(cfg)"):
    write_project(tmp_path, {
        "train.py": TRAIN.replace("CALL", call),
        "nets/__init__.py": "",
        "nets/builder.py": BUILDER.replace("WRAP_TEST", wrap_test),
    })
    return finding_set(tmp_path, "train.py", select="DDP014")


def test_a_wrap_the_builder_makes_only_without_mixed_precision_is_never_initialised(tmp_path):
    assert _found(tmp_path, "not cfg.half") == set()


@pytest.mark.parametrize("wrap_test, call", [
    # Another setting: the wrap may reach amp.initialize.
    ("cfg.world_size > 1", "net = build_trainer(cfg)"),
    # The builder's `cfg` is another namespace than the caller's: its test says nothing here.
    ("not cfg.half", "net = build_trainer(cfg.model)"),
])
def test_a_wrap_that_may_reach_amp_initialize_is_reported(tmp_path, wrap_test, call):
    assert _found(tmp_path, wrap_test, call) == {("train.py", 13, "DDP014")}


def test_the_builder_test_is_read_through_whatever_name_the_caller_passes(tmp_path):
    # The caller calls its namespace `args`, the builder its parameter `cfg`: `not cfg.half`
    # in the builder is `not args.half` at this call, the caller's `if args.half:` denies it.
    write_project(tmp_path, {
        "train.py": TRAIN.replace("CALL", "net = build_trainer(cfg)").replace("cfg", "args"),
        "nets/__init__.py": "",
        "nets/builder.py": BUILDER.replace("WRAP_TEST", "not cfg.half"),
    })
    assert finding_set(tmp_path, "train.py", select="DDP014") == set()
