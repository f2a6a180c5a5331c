"""apex's `amp.initialize` handed a model DDP has already wrapped (DDP014), through `ddpcheck
lint`: apex refuses a DDP-wrapped model, so initialising must come before the wrap."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch import nn


    def worker(gpu, args):
        dist.init_process_group("nccl", rank=gpu, world_size=args.world_size)
        torch.cuda.set_device(gpu)
        if args.amp:
            try:
                from apex import amp
            except ImportError:
                print("apex not found")
        net = nn.Linear(16, 4).cuda(gpu)
        aux = nn.Linear(4, 1).cuda(gpu)
        BEFORE
        opt = torch.optim.Adam(list(net.parameters()) + list(aux.parameters()), lr=1e-3)
        if args.amp and args.opt_level != "native":
            INIT
        AFTER
        return net, aux, opt


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--amp", action="store_true")
        parser.add_argument("--opt_level", default="O1")
        parser.add_argument("--world_size", type=int, default=2)
        worker(0, parser.parse_args())
    """

WRAP = "net = nn.parallel.DistributedDataParallel(net, device_ids=[gpu])"


def _lint(tmp_path, before: str, init: str, after: str) -> set[tuple[str, int, str]]:
    source = TRAIN.replace("BEFORE", before).replace("INIT", init).replace("AFTER", after)
    write_project(tmp_path, {"train.py": source})
    return finding_set(tmp_path, "train.py", select="DDP014")


def test_amp_initialize_of_the_wrapped_model_is_reported(tmp_path):
    assert _lint(tmp_path, WRAP, "[net, aux], opt = amp.initialize([net, aux], opt, opt_level=args.opt_level)",
                 "pass") == {("train.py", 22, "DDP014")}
    assert _lint(tmp_path, WRAP, "net, opt = amp.initialize(net, opt, opt_level=args.opt_level)",
                 "pass") == {("train.py", 22, "DDP014")}


def test_amp_initialize_before_the_wrap_is_clean(tmp_path):
    assert _lint(tmp_path, "pass", "net, opt = amp.initialize(net, opt, opt_level=args.opt_level)", WRAP) == set()
    # Another model beside the wrapped one (its inner module is not the wrapper).
    assert _lint(tmp_path, WRAP, "aux, opt = amp.initialize(aux, opt, opt_level=args.opt_level)", "pass") == set()
