"""False findings met on an eighth batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, the clean variants, and a variant still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


FIRST_WORKER_UTIL = """\
    import torch.distributed as dist


    def is_first_worker():
        return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0
"""

FIRST_WORKER_TRAIN = """\
    import sys
    sys.path += ["../"]
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from utils.util import is_first_worker


    def train(args, model, optimizer):
        for step in range(args.steps):
            optimizer.step()
            if is_first_worker() and step % args.save_steps == 0:
                torch.save(optimizer.state_dict(), os.path.join(args.out, "optimizer.pt"))
        if is_first_worker():
            torch.save(args, os.path.join(args.out, "training_args.bin"))


    def main(args):
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[args.local_rank])
        train(args, model, torch.optim.SGD(model.parameters(), lr=0.1))
        dist.destroy_process_group()
"""


def test_saves_under_a_first_worker_helper_are_rank_zero(tmp_path: Path) -> None:
    files = {"utils/util.py": FIRST_WORKER_UTIL, "utils/__init__.py": "", "drivers/run.py": FIRST_WORKER_TRAIN}
    (tmp_path / ".git").mkdir()  # the root marker of a clone: `../` on sys.path is read from it
    findings = lint_project(tmp_path, files, "drivers/run.py", select="DDP010")
    assert _lines(findings, "DDP010") == []
    # Spelled inline, without the availability test.
    inline = FIRST_WORKER_TRAIN.replace("is_first_worker()", "(not dist.is_initialized() or dist.get_rank() == 0)")
    findings = lint_project(tmp_path, {**files, "drivers/run.py": inline}, "drivers/run.py", select="DDP010")
    assert _lines(findings, "DDP010") == []
    # A helper whose other alternative is a free option holds on every rank where it is set.
    loose = FIRST_WORKER_UTIL.replace("not dist.is_initialized() or dist.get_rank() == 0",
                                      "not dist.is_initialized() or VERBOSE").replace(
        "import torch.distributed as dist", "import torch.distributed as dist\n    VERBOSE = True")
    findings = lint_project(tmp_path, {**files, "utils/util.py": loose}, "drivers/run.py", select="DDP010")
    assert _lines(findings, "DDP010") == [15, 17]


MAIN_RANK_METHOD = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, net, device):
            self.device = device
            self.net = DDP(net.to(device), device_ids=[device])

        def _on_main_rank(self):
            return torch.device(self.device) == torch.device("cuda:0")

        def save(self, path):
            if self._on_main_rank():
                torch.save(self.net.module.state_dict(), path)


    def worker(idx, world_size):
        dist.init_process_group("nccl", rank=idx, world_size=world_size)
        torch.cuda.set_device(idx)
        Trainer(torch.nn.Linear(4, 4), idx).save("model.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
"""


def test_private_on_main_rank_method_guards_the_save(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": MAIN_RANK_METHOD}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == []
    # A method named for something else says nothing about ranks: reported.
    other = MAIN_RANK_METHOD.replace("_on_main_rank", "_has_room")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [17]


SCHEDULER_LOADS = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(args):
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[args.local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        scaler = torch.cuda.amp.GradScaler()
        if os.path.isfile(os.path.join(args.model_dir, "optimizer.pt")):
            optimizer.load_state_dict(torch.load(os.path.join(args.model_dir, "optimizer.pt")))
            scheduler.load_state_dict(torch.load(os.path.join(args.model_dir, "scheduler.pt")))
            scaler.load_state_dict(torch.load(os.path.join(args.model_dir, "amp.pt")))
        dist.destroy_process_group()
"""


def test_scheduler_and_scaler_states_hold_no_tensors(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SCHEDULER_LOADS}, "train.py", select="DDP011")
    assert _lines(findings, "DDP011") == [16]
    # Named otherwise, the scheduler is still known by what built it.
    renamed = SCHEDULER_LOADS.replace("scheduler =", "warm =").replace("scheduler.load", "warm.load") \
        .replace('"scheduler.pt"', '"s.pt"')
    findings = lint_project(tmp_path, {"train.py": renamed}, "train.py", select="DDP011")
    assert _lines(findings, "DDP011") == [16]
    # A whole checkpoint loaded first, then split: its model and optimizer entries hold tensors.
    whole = SCHEDULER_LOADS.replace(
        '            scheduler.load_state_dict(torch.load(os.path.join(args.model_dir, "scheduler.pt")))',
        '            state = torch.load(os.path.join(args.model_dir, "checkpoint.pt"))\n'
        '            scheduler.load_state_dict(state["scheduler"])')
    findings = lint_project(tmp_path, {"train.py": whole}, "train.py", select="DDP011")
    assert _lines(findings, "DDP011") == [16, 17]


CACHE_BARRIERS = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import TensorDataset


    def load_examples(args, split):
        if args.local_rank not in [-1, 0] and not evaluate:
            torch.distributed.barrier()
        features = torch.randn(8, 4)
        if args.local_rank == 0 and not evaluate:
            torch.distributed.barrier()
        return TensorDataset(features)


    def evaluate(args, model):
        dataset = load_examples(args, "dev")
        return [model(x) for (x,) in dataset]


    def train(args, model):
        for step in range(args.steps):
            if args.local_rank in [-1, 0] and step % args.logging_steps == 0:
                if args.local_rank == -1:
                    evaluate(args, model)


    def main(args):
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[args.local_rank])
        train(args, model)
        if args.do_eval and args.local_rank in [-1, 0]:
            evaluate(args, torch.nn.Linear(4, 4).cuda())
        dist.destroy_process_group()
"""


def test_barriers_under_a_test_of_a_function_object_never_run(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"run.py": CACHE_BARRIERS}, "run.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # Without the single-process test inside the rank-0 block, the DDP model is evaluated there.
    bare = CACHE_BARRIERS.replace("                if args.local_rank == -1:\n                    evaluate(args, model)",
                                  "                evaluate(args, model)")
    findings = lint_project(tmp_path, {"run.py": bare}, "run.py", select="DDP009")
    assert _lines(findings, "DDP009") == [24]
    # A flag bound to a value (not a definition) may be false: the barriers may run.
    flagged = CACHE_BARRIERS.replace("    def load_examples(args, split):",
                                     "    evaluating = args_evaluating()\n\n\n    def load_examples(args, split):")
    flagged = flagged.replace("not evaluate:", "not evaluating:")
    findings = lint_project(tmp_path, {"run.py": flagged}, "run.py", select="DDP009")
    assert _lines(findings, "DDP009") == [37]


DEFAULTS = """\
    import argparse
    import sys

    args = {
        "world_size": 2,
        "train": {
            "learning_rate": 1e-4,
            "epochs": 10,
        },
    }


    def parse_args():
        parser = argparse.ArgumentParser()
        parser.add_argument("--learning_rate", type=float, default=None)
        parser.add_argument("--epochs", type=int, default=None)
        cmd_args = vars(parser.parse_args(sys.argv[1:]))
        update_args(args, cmd_args)
        return args


    def update_arg(args, key, value):
        if value is None:
            return True
        if key in args:
            args[key] = value
            return True
        for sub in args.values():
            if isinstance(sub, dict) and update_arg(sub, key, value):
                return True
        return False


    def update_args(args, cmd_args):
        for key in cmd_args:
            if not update_arg(args, key, cmd_args[key]):
                args[key] = cmd_args[key]
"""

DEFAULTS_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from utils.arguments import parse_args


    def worker(idx, world_size, args):
        train_config = args["train"]
        dist.init_process_group("nccl", rank=idx, world_size=world_size)
        torch.cuda.set_device(idx)
        net = DDP(torch.nn.Linear(4, 4).to(idx), device_ids=[idx])
        optimizer = torch.optim.Adam(net.parameters(), lr=train_config["learning_rate"])
        dist.destroy_process_group()


    if __name__ == "__main__":
        args = parse_args()
        mp.spawn(worker, args=(args["world_size"], args), nprocs=args["world_size"])
"""


def test_defaults_table_overridden_from_the_command_line(tmp_path: Path) -> None:
    files = {"utils/__init__.py": "", "utils/arguments.py": DEFAULTS, "train.py": DEFAULTS_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == []
    # A helper that only reads the table (prints it) leaves the literal rate in place: reported.
    printed = DEFAULTS.replace("        update_args(args, cmd_args)\n", "        show(args)\n") + (
        "\n\n    def show(args):\n        for key in args:\n            print(key, args[key])\n")
    findings = lint_project(tmp_path, {**files, "utils/arguments.py": printed}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [13]


GRAPH_NET = """\
    import torch


    class GraphNet(torch.nn.Module):
        def __init__(self, n_nodes, dim):
            super().__init__()
            self.n_nodes = n_nodes
            self.node_mlp = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.LayerNorm(dim))

        def forward(self, x):
            return self.node_mlp(x)
"""

GRAPH_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from graphnet import GraphNet


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
        torch.cuda.set_device(local_rank)
        model = DDP(GraphNet(100, 8).cuda(), device_ids=[local_rank])
        dataset = TensorDataset(torch.randn(64, 8))
        sampler = DistributedSampler(dataset, rank=local_rank, num_replicas=world_size)
        loader = DataLoader(dataset, batch_size=4, sampler=sampler)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for (x,) in loader:
                model(x.cuda()).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_graph_node_counts_do_not_plan_for_machines(tmp_path: Path) -> None:
    files = {"graphnet.py": GRAPH_NET, "train.py": GRAPH_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # The launch code itself counts nodes: a job of several machines, the local rank shards wrong.
    nodes = GRAPH_TRAIN.replace('        world_size = int(os.environ["WORLD_SIZE"])',
                                '        num_nodes = int(os.environ.get("NUM_NODES", "1"))\n'
                                '        world_size = int(os.environ["WORLD_SIZE"])')
    findings = lint_project(tmp_path, {**files, "train.py": nodes}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [19]


BLOCKS = """\
    import torch.nn as nn


    class ConvAttention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), nn.BatchNorm2d(dim), nn.ReLU())

        def forward(self, x):
            return self.conv(x)


    class NormAttention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.rnn = nn.GRU(dim, dim, batch_first=True)

        def forward(self, x):
            return self.rnn(self.norm(x))[0]
"""

NETWORK = """\
    import torch.nn as nn
    from modules.blocks import ConvAttention, \\
        NormAttention


    class Separator(nn.Module):
        def __init__(self, dim, layers):
            super().__init__()
            self.layers = nn.ModuleList([NormAttention(dim) for _ in range(layers)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
"""

SEPARATOR_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from models.separator import Separator


    def main(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(Separator(32, 2).to(rank), device_ids=[rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(main, args=(2,), nprocs=2)
"""


def test_only_the_imported_blocks_a_network_uses_count(tmp_path: Path) -> None:
    files = {"modules/__init__.py": "", "modules/blocks.py": BLOCKS, "models/__init__.py": "",
             "models/separator.py": NETWORK, "train.py": SEPARATOR_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == []
    # The network built from the convolutional block has BatchNorm layers: reported.
    conv = NETWORK.replace("[NormAttention(dim)", "[ConvAttention(dim)")
    findings = lint_project(tmp_path, {**files, "models/separator.py": conv}, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == [11]


SCHEDULE_LENGTH = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from schedules import cosine_lr


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
        torch.cuda.set_device(local_rank)
        lr = 3e-4
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        dataset = TensorDataset(torch.randn(64, 8))
        sampler = DistributedSampler(dataset, num_replicas=world_size)
        loader = DataLoader(dataset, batch_size=1, sampler=sampler)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        total_steps = len(loader) * 100
        schedule = cosine_lr(optimizer, lr, 1000, total_steps)
        for step, (x,) in enumerate(loader):
            schedule(step)
            model(x.cuda()).sum().backward()
            optimizer.step()
        dist.destroy_process_group()
"""


def test_schedule_length_is_not_a_scale_of_the_rate(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SCHEDULE_LENGTH}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [21]
    # A scale computed from the world size and handed on with the optimizer: the rate is scaled.
    scaled = SCHEDULE_LENGTH.replace("        total_steps = len(loader) * 100\n",
                                     "        total_steps = len(loader) * 100\n        factor = world_size * 1 / 8\n") \
        .replace("cosine_lr(optimizer, lr, 1000, total_steps)", "cosine_lr(optimizer, lr, factor)")
    findings = lint_project(tmp_path, {"train.py": scaled}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == []
