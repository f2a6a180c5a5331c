"""Two ways a network or a set-up is written that decide what the run holds, through `ddpcheck
lint`: a layer class whose `__init__` builds BatchNorm only for one value of a string or flag
parameter that every construction leaves at another (DDP012), and a second training set-up left
in the script beside the one its `__main__` block runs, with its own checkpoint helper (DDP007,
DDP012, DDP019). Each with the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

# --- a layer class with a norm switch ------------------------------------------------------

LAYERS = """\
    import torch.nn as nn


    class ConvUnit(nn.Module):
        def __init__(self, in_ch, out_ch, kernel=3, stride=1, norm="none", activation="relu"):
            super().__init__()
            self.conv = nn.Conv2d(in_ch, out_ch, kernel, stride, padding=kernel // 2)
            if norm == "bn":
                self.norm = nn.BatchNorm2d(out_ch)
            elif norm == "in":
                self.norm = nn.InstanceNorm2d(out_ch)
            elif norm == "none":
                self.norm = None
            else:
                raise ValueError(norm)
            self.act = nn.ReLU() if activation == "relu" else nn.LeakyReLU(0.2)

        def forward(self, x):
            x = self.conv(x)
            if self.norm:
                x = self.norm(x)
            return self.act(x)


    def strided(in_ch, out_ch, activation="lrelu"):
        return ConvUnit(in_ch, out_ch, 4, 2, activation=activation)


    class Critic(nn.Module):
        def __init__(self, width=64):
            super().__init__()
            self.body = nn.Sequential(strided(3, width), strided(width, width * 2))
            self.head = ConvUnit(width * 2, 1, 3, 1HEAD)

        def forward(self, x):
            return self.head(self.body(x))
    """

CRITIC_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist

    from layers import Critic

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    critic = torch.nn.parallel.DistributedDataParallel(Critic().cuda(), device_ids=[local_rank])
    """


def _critic(tmp_path: Path, head: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"layers.py": LAYERS.replace("HEAD", head), "train.py": CRITIC_TRAIN})
    return finding_set(tmp_path, "train.py", "layers.py", select="DDP012")


def test_a_layer_class_left_at_its_norm_default_builds_no_batchnorm(tmp_path: Path) -> None:
    assert _critic(tmp_path, "") == set()


def test_a_layer_class_given_another_norm_builds_no_batchnorm(tmp_path: Path) -> None:
    assert _critic(tmp_path, ', "in"') == set()


def test_a_layer_class_given_batchnorm_is_reported(tmp_path: Path) -> None:
    assert _critic(tmp_path, ', "bn"') == {("train.py", 11, "DDP012")}
    assert _critic(tmp_path, ', norm="bn"') == {("train.py", 11, "DDP012")}


def test_a_layer_class_handed_on_uncalled_may_build_batchnorm(tmp_path: Path) -> None:
    # `partial(ConvUnit, norm="bn")`: a construction the followed calls do not show.
    layers = LAYERS.replace("HEAD", "").replace(
        "self.head = ConvUnit(width * 2, 1, 3, 1)",
        "self.head = functools.partial(ConvUnit, norm=\"bn\")(width * 2, 1, 3, 1)",
    ).replace("import torch.nn as nn", "import functools\n\n    import torch.nn as nn")
    write_project(tmp_path, {"layers.py": layers, "train.py": CRITIC_TRAIN})
    assert finding_set(tmp_path, "train.py", "layers.py", select="DDP012") == {("train.py", 11, "DDP012")}


# --- a set-up left beside the one the run uses ----------------------------------------------

TWO_SETUPS = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def make_net():
        return nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 3, 3))


    def write_ckpt(net, opt, path):
        torch.save({"net": net.state_dict(), "opt": opt.state_dict()}, path)


    def train_old(args):
        dist.init_process_group("nccl")
        gpu = dist.get_rank()
        torch.cuda.set_device(gpu)
        net = DDP(make_net().cuda(gpu), device_ids=[gpu])
        opt = torch.optim.Adam(net.parameters(), lr=args.lr)
        for step in range(args.steps):
            opt.zero_grad()
            net(torch.randn(4, 3, 32, 32, device=gpu)).mean().backward()
            opt.step()
        write_ckpt(net, opt, "old.pt")


    def train_new(args):
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(gpu)
        net = DDP(nn.Linear(8, 8).cuda(gpu), device_ids=[gpu])
        opt = torch.optim.Adam(net.parameters(), lr=args.lr)
        for step in range(args.steps):
            opt.zero_grad()
            net(torch.randn(4, 8, device=gpu)).sum().backward()
            opt.step()
        if dist.get_rank() == 0:
            torch.save(net.module.state_dict(), "new.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=1e-3)
        parser.add_argument("--steps", type=int, default=100)
        train_new(parser.parse_args())
    """


def test_a_set_up_nothing_runs_is_not_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TWO_SETUPS})
    assert finding_set(tmp_path, "train.py", select="DDP007,DDP012,DDP019") == set()


def test_the_same_set_up_run_by_the_main_block_is_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TWO_SETUPS.replace("train_new(parser", "train_old(parser")})
    assert finding_set(tmp_path, "train.py", select="DDP007,DDP012,DDP019") == {
        ("train.py", 15, "DDP019"), ("train.py", 20, "DDP007"), ("train.py", 22, "DDP012")}


def test_a_helper_also_called_by_the_run_is_reported(tmp_path: Path) -> None:
    # `write_ckpt` is called from the set-up that runs too: its save is on the run.
    text = TWO_SETUPS.replace('torch.save(net.module.state_dict(), "new.pt")', 'write_ckpt(net, opt, "new.pt")')
    write_project(tmp_path, {"train.py": text})
    assert finding_set(tmp_path, "train.py", select="DDP019") == {("train.py", 15, "DDP019")}


FLAG_LAYERS = """\
    import torch.nn as nn


    class Stage(nn.Module):
        def __init__(self, channels, use_bn=False):
            super().__init__()
            self.conv = nn.Conv2d(channels, channels, 3, padding=1)
            self.bn = None
            if use_bn:
                self.bn = nn.BatchNorm2d(channels)

        def forward(self, x):
            x = self.conv(x)
            return self.bn(x) if self.bn is not None else x


    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.stages = nn.Sequential(Stage(16), Stage(16){second})

        def forward(self, x):
            return self.stages(x)
    """

TOWER_TRAIN = CRITIC_TRAIN.replace("Critic", "Tower")


def test_a_layer_class_flag_left_false_builds_no_batchnorm(tmp_path: Path) -> None:
    write_project(tmp_path, {"layers.py": FLAG_LAYERS.format(second=""), "train.py": TOWER_TRAIN})
    assert finding_set(tmp_path, "train.py", "layers.py", select="DDP012") == set()
    write_project(tmp_path, {"layers.py": FLAG_LAYERS.format(second=", Stage(16, use_bn=True)"),
                             "train.py": TOWER_TRAIN})
    assert finding_set(tmp_path, "train.py", "layers.py", select="DDP012") == {("train.py", 11, "DDP012")}


def test_a_subclass_of_the_layer_class_may_switch_batchnorm_on(tmp_path: Path) -> None:
    layers = FLAG_LAYERS.format(second=", NormedStage(16)") + """
    class NormedStage(Stage):
        def __init__(self, channels):
            super().__init__(channels, True)
    """
    write_project(tmp_path, {"layers.py": layers, "train.py": TOWER_TRAIN})
    assert finding_set(tmp_path, "train.py", "layers.py", select="DDP012") == {("train.py", 11, "DDP012")}
