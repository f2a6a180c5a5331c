"""False findings met on a sixth batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, with the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


SAME_FLAG_TWICE = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    num_gpus = torch.cuda.device_count()


    def setup_loader(dataset, batch_size):
        sampler = DistributedSampler(dataset, shuffle=True) if num_gpus > 1 else None
        loader = DataLoader(dataset,
                            batch_size=batch_size,
                            shuffle=False if num_gpus > 1 else True,
                            sampler=sampler,
                            drop_last=False)
        return loader


    if __name__ == "__main__":
        if num_gpus > 1:
            dist.init_process_group("nccl")
        loader = setup_loader(list(range(100)), 8)
"""


def test_one_flag_test_written_twice_picks_sampler_and_shuffle_together(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SAME_FLAG_TWICE}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == []
    # A different test for shuffle does not go with the sampler's.
    other = SAME_FLAG_TWICE.replace("shuffle=False if num_gpus > 1 else True",
                                    "shuffle=False if num_gpus > 2 else True")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == [12]
    # A test that calls something may answer differently each time.
    called = SAME_FLAG_TWICE.replace("if num_gpus > 1 else", "if torch.cuda.device_count() > 1 else")
    findings = lint_project(tmp_path, {"train.py": called}, "train.py", select="DDP006")
    assert _lines(findings, "DDP006") == [12]


SPAWNING_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def worker(gpu, world_size):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu,
                                world_size=world_size)
        torch.cuda.set_device(gpu)
        dist.destroy_process_group()


    def main():
        world_size = torch.cuda.device_count()
        mp.spawn(worker, nprocs=world_size, args=(world_size,))
"""


def test_spawn_reached_from_a_package_main_module_is_not_relaunched(tmp_path: Path) -> None:
    files = {"speech/__init__.py": "", "speech/train.py": SPAWNING_TRAIN,
             "speech/__main__.py": "from .train import main\nmain()\n"}
    findings = lint_project(tmp_path, files, "speech/__main__.py", select="DDP017")
    assert _lines(findings, "DDP017") == []
    # The same module-level call in a script that children re-import is reported.
    files["run.py"] = "from speech.train import main\nmain()\n"
    findings = lint_project(tmp_path, files, "run.py", select="DDP017")
    assert _lines(findings, "DDP017") == [2]


RESEEDED_PER_RANK = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def train(model, opt, args):
        # different sampling on each rank
        torch.manual_seed(args.seed + args.global_rank)
        data = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
        loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=0)
        args = parser.parse_args()
        torch.manual_seed(args.seed)
        dist.init_process_group("gloo")
        args.global_rank = dist.get_rank()
        net = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.1), nn.Linear(64, 1))
        model = DistributedDataParallel(net)
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), args)
        dist.destroy_process_group()
"""


def test_a_seed_taken_again_with_the_rank_before_training_is_not_the_same_seed(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RESEEDED_PER_RANK}, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == []
    # Reseeded with the same seed again: every rank still drops the same units.
    same = RESEEDED_PER_RANK.replace("torch.manual_seed(args.seed + args.global_rank)",
                                     "torch.manual_seed(args.seed)")
    findings = lint_project(tmp_path, {"train.py": same}, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == [13, 27]
    # A per-rank reseed only on some paths leaves the others with the same seed.
    optional = RESEEDED_PER_RANK.replace("        train(model,", "        if args.seed:\n            train(model,")
    findings = lint_project(tmp_path, {"train.py": optional}, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == [27]


QA_DATA = """\
    import json

    import torch
    from torch.utils.data import Dataset


    def load_rows(path, global_rank=-1, world_size=-1):
        with open(path) as f:
            rows = json.load(f)
        kept = []
        for i, row in enumerate(rows):
            if global_rank > -1 and not i % world_size == global_rank:
                continue
            kept.append(row)
        return kept


    class QADataset(Dataset):
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            return torch.tensor(self.rows[i]["x"])
"""

QA_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, RandomSampler

    import data


    def train(model, train_set, steps=100):
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        loader = DataLoader(train_set, sampler=RandomSampler(train_set), batch_size=8, drop_last=True)
        for x in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        rows = data.load_rows("train.json", global_rank=rank, world_size=world)
        train_set = data.QADataset(rows)
        model = DistributedDataParallel(nn.Linear(8, 1).cuda())
        train(model, train_set)
        dist.destroy_process_group()
"""


def test_rows_kept_by_rank_before_the_dataset_is_built_need_no_sampler(tmp_path: Path) -> None:
    files = {"data.py": QA_DATA, "train.py": QA_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # Rows read whole on every rank: each rank's RandomSampler draws from the full set.
    files["data.py"] = QA_DATA.replace("global_rank > -1 and not i % world_size == global_rank",
                                       "not row")
    findings = lint_project(tmp_path, files, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [12]


ICE_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    from nets import IceNet


    def main():
        dist.init_process_group("nccl")
        local_rank = dist.get_rank() % torch.cuda.device_count()
        torch.cuda.set_device(local_rank)
        net = DistributedDataParallel(IceNet().cuda(), device_ids=[local_rank])
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for step in range(100):
            loss = net(torch.randn(4, 3, device="cuda")).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if dist.get_rank() == 0:
            torch.save(net.state_dict(), "model/icenet.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

ICE_NETS = """\
    import torch.nn as nn


    class IceNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 3))

        def forward(self, x):
            return self.body(x)
"""

ICE_ANALYZE = """\
    import torch
    import torch.nn as nn

    from nets import IceNet

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = IceNet()
    model = nn.DataParallel(model)
    model.load_state_dict(torch.load("model/icenet.pth", map_location=device))
    model.eval()
    print(model(torch.randn(8, 3)).mean().item())
"""


def test_checkpoints_read_back_into_a_data_parallel_wrapper_keep_their_prefix(tmp_path: Path) -> None:
    files = {"train_ddp.py": ICE_TRAIN, "nets.py": ICE_NETS, "analyze.py": ICE_ANALYZE}
    findings = lint_project(tmp_path, files, "train_ddp.py", select="DDP019")
    assert _lines(findings, "DDP019") == []
    # Read back into the plain model: the keys do not match.
    files["analyze.py"] = ICE_ANALYZE.replace("model = nn.DataParallel(model)\n", "")
    findings = lint_project(tmp_path, files, "train_ddp.py", select="DDP019")
    assert _lines(findings, "DDP019") == [21]
    # A DataParallel script that saves as well round-trips its own checkpoints: it says nothing
    # about who reads the run's.
    files["analyze.py"] = ICE_ANALYZE + 'torch.save(model.state_dict(), "model/tuned.pth")\n'
    findings = lint_project(tmp_path, files, "train_ddp.py", select="DDP019")
    assert _lines(findings, "DDP019") == [21]


SYNTH_UTILS = """\
    import torch


    def run_torch(model, tokens):
        if hasattr(model, "module"):
            return model.module.generate(tokens)
        return model.generate(tokens)


    def run_exported(model, tokens):
        return model(tokens)


    def synthesize(model, text, backend="torch"):
        tokens = torch.tensor([[ord(c) % 64 for c in text]])
        if backend == "torch":
            out = run_torch(model, tokens)
        elif backend == "exported":
            out = run_exported(model, tokens)
        return out
"""

SYNTH_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    from synth import synthesize


    class Voice(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(64, 32)
            self.norm = nn.BatchNorm1d(32)
            self.out = nn.Linear(32, 80)

        def forward(self, tokens):
            return self.out(self.norm(self.emb(tokens).transpose(1, 2)).transpose(1, 2))

        def generate(self, tokens):
            with torch.no_grad():
                return self.forward(tokens)


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank % torch.cuda.device_count())
        model = DistributedDataParallel(Voice().cuda())
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        for epoch in range(10):
            loss = model(torch.randint(0, 64, (8, 20)).cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0:
                mel = synthesize(model, "hello world")
                torch.save(mel, f"mel_{epoch}.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_helper_branch_the_call_leaves_untaken_does_not_run_the_ddp_forward(tmp_path: Path) -> None:
    files = {"synth.py": SYNTH_UTILS, "train.py": SYNTH_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # Passed the backend that calls the wrapper itself: DDP's forward on rank 0 alone.
    files["train.py"] = SYNTH_TRAIN.replace('synthesize(model, "hello world")',
                                            'synthesize(model, "hello world", backend="exported")')
    findings = lint_project(tmp_path, files, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [36]


WEATHER_LAYERS = """\
    import torch
    from torch import nn
    from timm.models.layers import DropPath, trunc_normal_


    class Block(nn.Module):
        def __init__(self, dim, drop_path=0.1):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.fc = nn.Linear(dim, dim)
            self.drop_path = DropPath(drop_path)
            trunc_normal_(self.fc.weight, std=0.02)

        def forward(self, x):
            return x + self.drop_path(self.fc(self.norm(x)))


    class WeatherNet(nn.Module):
        def __init__(self, dim=32, depth=4):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])

        def forward(self, x):
            return self.blocks(x)
"""

WEATHER_TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from layers import WeatherNet


    def validate(model, batches):
        model.eval()
        with torch.no_grad():
            return sum(model(x).pow(2).mean().item() for x in batches)


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank % torch.cuda.device_count())
        model = DistributedDataParallel(WeatherNet().cuda())
        opt = torch.optim.Adam(model.parameters(), lr=5e-4)
        batches = [torch.randn(2, 32).cuda() for _ in range(4)]
        for epoch in range(5):
            model.train()
            for x in batches:
                loss = model(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            if rank == 0:
                print(epoch, validate(model, batches))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_timm_drop_path_and_init_helpers_give_a_network_no_buffers(tmp_path: Path) -> None:
    files = {"layers.py": WEATHER_LAYERS, "train.py": WEATHER_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # A timm network (or a layer with buffers) may broadcast them in DDP's forward.
    files["layers.py"] = WEATHER_LAYERS.replace("import DropPath, trunc_normal_",
                                                "import DropPath, trunc_normal_, RelPosBias")
    findings = lint_project(tmp_path, files, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [29]


ZOO = """\
    import torch
    import torch.nn as nn


    def double_conv(c_in, c_out):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(c_out, c_out, 3, padding=1), nn.ReLU())


    def bn_conv(c_in, c_out):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU())


    class UNet(nn.Module):
        def __init__(self, c_in, c_out):
            super().__init__()
            self.down = double_conv(c_in, 16)
            self.drop = nn.Dropout(0.5)
            self.up = nn.Conv2d(16, c_out, 1)

        def forward(self, x):
            return self.up(self.drop(self.down(x)))


    class HydraCNN(nn.Module):
        def __init__(self, c_in, c_out):
            super().__init__()
            self.body = bn_conv(c_in, 16)
            self.bn = nn.BatchNorm2d(16)
            self.head = nn.Conv2d(16, c_out, 1)

        def forward(self, x):
            return self.head(self.bn(self.body(x)))
"""

ZOO_TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from zoo import *


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = dist.get_rank() % torch.cuda.device_count()
        torch.cuda.set_device(local_rank)
        net = UNet(3, 2)
        net.cuda()
        net = DistributedDataParallel(net, device_ids=[local_rank])
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for step in range(10):
            loss = net(torch.randn(2, 3, 32, 32).cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.destroy_process_group()
"""


def test_batchnorm_in_a_neighbouring_network_of_the_same_module_does_not_count(tmp_path: Path) -> None:
    files = {"zoo.py": ZOO, "train.py": ZOO_TRAIN}
    findings = lint_project(tmp_path, files, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == []
    # The network that has BatchNorm is built.
    files["train.py"] = ZOO_TRAIN.replace("net = UNet(3, 2)", "net = HydraCNN(3, 2)")
    findings = lint_project(tmp_path, files, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == [14]
    # A module-level helper the built network calls builds BatchNorm.
    files["train.py"] = ZOO_TRAIN
    files["zoo.py"] = ZOO.replace("self.down = double_conv(c_in, 16)", "self.down = bn_conv(c_in, 16)")
    findings = lint_project(tmp_path, files, "train.py", select="DDP012")
    assert _lines(findings, "DDP012") == [14]
