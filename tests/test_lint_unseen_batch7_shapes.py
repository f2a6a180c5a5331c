"""False findings met on a seventh batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, and the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project, run_cli, write_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


PROGRESS_ON_RANK_ZERO = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    def is_main_process(rank):
        return rank in (-1, 0)


    def train(net, train_loader, optimizer, local_rank, epochs):
        for epoch in range(epochs):
            loop = train_loader
            if is_main_process(local_rank):
                loop = tqdm(train_loader, desc="train")
            for step, (x, y) in enumerate(loop):
                loss = torch.nn.functional.mse_loss(net(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                dist.barrier()


    if __name__ == "__main__":
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
        train(net, [], torch.optim.SGD(net.parameters(), lr=0.1), local_rank, 3)
        dist.destroy_process_group()
"""


def test_progress_bar_made_on_rank_zero_iterates_the_same_batches(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": PROGRESS_ON_RANK_ZERO}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # `from tqdm.auto import tqdm` and the keyword spelling are the same bar.
    auto = PROGRESS_ON_RANK_ZERO.replace("from tqdm import tqdm", "from tqdm.auto import tqdm").replace(
        "tqdm(train_loader,", "tqdm(iterable=train_loader,")
    findings = lint_project(tmp_path, {"train.py": auto}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # A bar over a slice of the batches does change the count: still reported.
    sliced = PROGRESS_ON_RANK_ZERO.replace("tqdm(train_loader,", "tqdm(train_loader[:10],")
    findings = lint_project(tmp_path, {"train.py": sliced}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [18]
    # So does rank 0 iterating something else than the other ranks.
    other = PROGRESS_ON_RANK_ZERO.replace("loop = tqdm(train_loader,", "loop = tqdm(range(10),")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [18]


LOADER_BY_SOURCE = """\
    import os

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset, DistributedSampler


    class TokenBlocks(Dataset):
        def __init__(self, blocks):
            self.blocks = blocks

        def __len__(self):
            return len(self.blocks)

        def __getitem__(self, i):
            return self.blocks[i]


    class StridedBlocks(Dataset):
        def __init__(self, path, rank, world):
            self.data = np.memmap(path, dtype=np.uint16, mode="r")
            self.rank, self.world = rank, world

        def __len__(self):
            return len(self.data) // (1024 * self.world)

        def __getitem__(self, i):
            start = (i * self.world + self.rank) * 1024
            return torch.from_numpy(self.data[start:start + 1024].astype(np.int64))


    def build_loader(rank, source="toy", batch_size=8):
        if source == "toy":
            ds = TokenBlocks(torch.randint(0, 100, (512, 64)))
            loader = DataLoader(ds, batch_size=batch_size, shuffle=True)
        elif source == "memmap":
            ds = StridedBlocks("train.bin", rank, dist.get_world_size())
            loader = DataLoader(ds, batch_size=batch_size)
        return loader


    def main():
        rank = int(os.environ["RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = DDP(torch.nn.Embedding(100, 8).cuda())
        loader = build_loader(rank, source="memmap", batch_size=16)
        for x in loader:
            model(x.cuda()).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_loader_in_a_branch_every_caller_rules_out(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": LOADER_BY_SOURCE}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # Passed by position, and from a builder in another module: the same.
    positional = LOADER_BY_SOURCE.replace('build_loader(rank, source="memmap", batch_size=16)',
                                          'build_loader(rank, "memmap", 16)')
    findings = lint_project(tmp_path, {"train.py": positional}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # A caller that takes the toy branch (here by leaving the default) makes it reachable.
    default = LOADER_BY_SOURCE.replace('build_loader(rank, source="memmap", batch_size=16)',
                                       "build_loader(rank, batch_size=16)")
    findings = lint_project(tmp_path, {"train.py": default}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [37]
    # A value the command line chooses may be either.
    flagged = LOADER_BY_SOURCE.replace(
        '    def main():\n', '    def main():\n        import sys\n').replace(
        'source="memmap"', "source=sys.argv[1]")
    findings = lint_project(tmp_path, {"train.py": flagged}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [37]


def test_loader_in_a_ruled_out_branch_of_a_data_module(tmp_path: Path) -> None:
    head, _, tail = LOADER_BY_SOURCE.partition("    def main():\n")
    data = head
    script = ("    import os\n\n    import torch\n    import torch.distributed as dist\n"
              "    from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
              "    from data import build_loader\n\n\n    def main():\n" + tail)
    files = {"data.py": data, "train.py": script}
    findings = lint_project(tmp_path, files, "train.py", select="DDP001")
    assert [(f["path"].rsplit("/", 1)[-1], f["location"]["line"]) for f in findings] == []
    files["train.py"] = script.replace('source="memmap", ', "")
    findings = lint_project(tmp_path, files, "train.py", select="DDP001")
    assert [(f["path"].rsplit("/", 1)[-1], f["location"]["line"]) for f in findings] == [("data.py", 37)]


MOVED_EACH_STEP = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    net = net.cuda()
    net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    net = nn.parallel.DistributedDataParallel(net, device_ids=[local_rank])
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)

    for epoch in range(10):
        for x in range(100):
            net.to(device).train()
            loss = net(torch.randn(2, 3, 8, 8, device=device)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()
"""


def test_move_to_the_current_gpu_after_a_cuda_call_moves_nothing(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": MOVED_EACH_STEP}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []
    # The plain string and the reverse order of spellings are the same device.
    for before, after in (("net.cuda()", 'net.to("cuda")'), ("net.to(device)", "net.cuda()")):
        variant = MOVED_EACH_STEP.replace("net = net.cuda()", f"net = {before}").replace(
            "net.to(device).train()", f"{after}.train()")
        findings = lint_project(tmp_path, {"train.py": variant}, "train.py", select="DDP014")
        assert _lines(findings, "DDP014") == [], (before, after)
    # In place before the wrap, then again in the loop.
    in_place = MOVED_EACH_STEP.replace("net = net.cuda()", "net.cuda()").replace(
        "net = nn.SyncBatchNorm.convert_sync_batchnorm(net)", "net.float()")
    findings = lint_project(tmp_path, {"train.py": in_place}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []
    # A device read from the command line, or the CPU, may be elsewhere: reported.
    chosen = MOVED_EACH_STEP.replace('torch.device("cuda" if torch.cuda.is_available() else "cpu")',
                                     "torch.device(os.environ.get('DEVICE', 'cuda'))")
    findings = lint_project(tmp_path, {"train.py": chosen}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [20]
    cpu = MOVED_EACH_STEP.replace("net.to(device).train()", 'net.to("cpu").train()')
    findings = lint_project(tmp_path, {"train.py": cpu}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [20]
    indexed = MOVED_EACH_STEP.replace("net = net.cuda()", "net = net.cuda(1)")
    findings = lint_project(tmp_path, {"train.py": indexed}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [20]


DDP_TRAINER = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from net import Net

    WORKDIR = "exp"


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
        args = parser.parse_args()
        dist.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        model = DDP(Net().cuda(), device_ids=[args.local_rank])
        best = float("inf")
        for epoch in range(10):
            loss = model(torch.randn(4, 8).cuda()).mean()
            loss.backward()
            if args.local_rank == 0 and loss.item() < best:
                best = loss.item()
                torch.save(model.state_dict(), WORKDIR + "/weights/best.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

SINGLE_NODE_TWIN = """\
    import os

    import torch
    import torch.nn as nn

    from net import Net

    WORKDIR = "exp"


    def main(resume):
        model = nn.DataParallel(Net().cuda())
        if resume and os.path.exists(WORKDIR + "/weights/best.pth"):
            model.load_state_dict(torch.load(WORKDIR + "/weights/best.pth"))
        for epoch in range(10):
            loss = model(torch.randn(4, 8).cuda()).mean()
            loss.backward()
            torch.save(model.state_dict(), WORKDIR + "/weights/best.pth")


    if __name__ == "__main__":
        main(resume=True)
"""

NET = "import torch.nn as nn\n\n\nclass Net(nn.Linear):\n    def __init__(self):\n        super().__init__(8, 1)\n"


def test_dataparallel_twin_that_resumes_from_the_run_file_reads_the_prefix(tmp_path: Path) -> None:
    files = {"train_distributed.py": DDP_TRAINER, "train.py": SINGLE_NODE_TWIN, "net.py": NET}
    findings = lint_project(tmp_path, files, "train_distributed.py", select="DDP019")
    assert _lines(findings, "DDP019") == []
    # A twin that loads another file of its own reads its own checkpoints, not the run's.
    files["train.py"] = SINGLE_NODE_TWIN.replace(
        'os.path.exists(WORKDIR + "/weights/best.pth"):\n            model.load_state_dict(torch.load(WORKDIR + "/weights/best.pth"))',
        'os.path.exists(WORKDIR + "/dp_last.pth"):\n            model.load_state_dict(torch.load(WORKDIR + "/dp_last.pth"))')
    findings = lint_project(tmp_path, files, "train_distributed.py", select="DDP019")
    assert _lines(findings, "DDP019") == [26]
    # A twin that loads the run's file into the plain model does not read the prefix.
    files["train.py"] = SINGLE_NODE_TWIN.replace("nn.DataParallel(Net().cuda())", "Net().cuda()")
    findings = lint_project(tmp_path, files, "train_distributed.py", select="DDP019")
    assert _lines(findings, "DDP019") == [26]


SAVE_EITHER_WAY = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Classifier(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, n))

        def forward(self, x):
            return self.body(x)


    def train_model(model, rank, epochs):
        ddp = DDP(model.to(rank), device_ids=[rank])
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
        for _ in range(epochs):
            ddp(torch.randn(8, 16, device=rank)).sum().backward()
            opt.step()


    def main(rank, world_size):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = Classifier(3)
        train_model(model, rank, 5)
        if hasattr(model, 'module'):
            torch.save(model.module.state_dict(), 'out/model.pth')
        else:
            torch.save(model.state_dict(), 'out/model.pth')
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(main, args=(2,), nprocs=2)
"""


def test_hasattr_module_on_a_project_network_is_false(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SAVE_EITHER_WAY}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [33]
    # Wrapped under the same name before the test: not a project network, so not decided here.
    wrapped = SAVE_EITHER_WAY.replace("        model = Classifier(3)\n",
                                      "        model = DDP(Classifier(3).to(rank), device_ids=[rank])\n")
    findings = lint_project(tmp_path, {"train.py": wrapped}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [31, 33]
    # A network that registers a submodule under that name: either may run.
    own = SAVE_EITHER_WAY.replace("self.body = nn.Sequential(", "self.module = nn.Sequential(").replace(
        "return self.body(x)", "return self.module(x)")
    findings = lint_project(tmp_path, {"train.py": own}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [31, 33]
    added = SAVE_EITHER_WAY.replace("        model = Classifier(3)\n",
                                    "        model = Classifier(3)\n        model.add_module('module', nn.Identity())\n")
    findings = lint_project(tmp_path, {"train.py": added}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [32, 34]


LOGGING_RANK = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    GPU_OFFSET = 1
    LOG_RANK = 1


    def setup():
        local_rank = int(os.environ["LOCAL_RANK"]) + GPU_OFFSET
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        return local_rank


    def main():
        local_rank = setup()
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        tracker = object() if local_rank == GPU_OFFSET + LOG_RANK else None
        for step in range(1000):
            loss = model(torch.randn(4, 8).cuda()).pow(2).mean()
            loss.backward()
            if step % 100 == 0 and tracker:
                print(f"step {step} loss {loss.item():.4f}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_rank_compared_to_a_configured_constant_picks_one_rank(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": LOGGING_RANK}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # A literal rank, and the comparison written straight in the loop.
    literal = LOGGING_RANK.replace("and tracker:", "and local_rank == 2:")
    findings = lint_project(tmp_path, {"train.py": literal}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # A rank read from the environment is no configured value: every rank prints.
    env = LOGGING_RANK.replace("and tracker:", "and local_rank == int(os.environ['LOCAL_RANK']):")
    findings = lint_project(tmp_path, {"train.py": env}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [26]


PLAIN_NET = """\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv1d(2, 16, 3, padding=1), nn.ReLU(), nn.Conv1d(16, 1, 1))

        def forward(self, x):
            return self.body(x)


    # if __name__ == "__main__":
    #     x = torch.randn(4, 2, 1000)
    #     print(Net()(x).shape)
"""

SEEDED_TRAINER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from model import Net


    def main():
        torch.manual_seed(42)
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        data = TensorDataset(torch.zeros(64, 2, 1000), torch.zeros(64, 1, 1000))
        sampler = DistributedSampler(data, shuffle=True)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        model = DDP(Net().cuda(), device_ids=[local_rank])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(5):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_commented_out_draws_draw_nothing(tmp_path: Path) -> None:
    files = {"model.py": PLAIN_NET, "train.py": SEEDED_TRAINER}
    findings = lint_project(tmp_path, files, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == []
    # In a docstring: the same.
    files["model.py"] = PLAIN_NET.replace("    # if __name__", '    """Smoke test: Net()(torch.randn(4, 2, 1000))"""\n    # if __name__')
    findings = lint_project(tmp_path, files, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == []
    # A forward that draws noise does draw alike on every rank.
    files["model.py"] = PLAIN_NET.replace("return self.body(x)", "return self.body(x + 0.01 * torch.randn_like(x))")
    findings = lint_project(tmp_path, files, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == [12]


FIRE_ENTRY = """\
    import os

    import torch
    import torch.distributed as dist
    from fire import Fire
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main(epochs: int = 10, save_ckpt: bool = False, ckpt_dir: str = "ckpt"):
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        for epoch in range(epochs):
            model(torch.randn(4, 8).cuda()).sum().backward()
            if save_ckpt:
                torch.save(model.module.state_dict(), f"{ckpt_dir}/last.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        Fire(main)
"""


def test_parameters_of_a_function_fire_runs_are_command_line_options(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": FIRE_ENTRY}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [17]
    # typer's runner and fire's module spelling bind the parameters the same way.
    typer = FIRE_ENTRY.replace("from fire import Fire", "import typer").replace("Fire(main)", "typer.run(main)")
    findings = lint_project(tmp_path, {"train.py": typer}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == [17]
    # Called plainly, the default is the run's value: the branch never runs.
    plain = FIRE_ENTRY.replace("Fire(main)", "main()")
    findings = lint_project(tmp_path, {"train.py": plain}, "train.py", select="DDP010")
    assert _lines(findings, "DDP010") == []


LISTED_LOSSES = """\
    import os
    import statistics

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def validate(model, criterion, val_loader, step):
        model.eval()
        mel_losses, gate_losses = [], []
        with torch.no_grad():
            for x, y in val_loader:
                mel_loss, gate_loss = criterion(model(x.cuda()), y.cuda())
                mel_losses.append(mel_loss.item())
                gate_losses.append(gate_loss.item())
        model.train()
        print("validation at step={}: mel={:4f} gate={:4f}".format(
            step, statistics.mean(mel_losses), statistics.mean(gate_losses)))


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        val_set = TensorDataset(torch.randn(100, 8), torch.randn(100, 8))
        val_loader = DataLoader(val_set, batch_size=4, sampler=DistributedSampler(val_set, shuffle=False))
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        criterion = lambda p, y: ((p - y).pow(2).mean(), (p - y).abs().mean())
        for step in range(10):
            validate(model, criterion, val_loader, step)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_losses_collected_in_lists_over_a_shard_are_one_shard(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": LISTED_LOSSES}, "train.py", select="DDP036")
    assert _lines(findings, "DDP036") == [19]
    # Gathered from every rank before the report: the whole set.
    gathered = LISTED_LOSSES.replace("        model.train()\n", (
        "        model.train()\n"
        "        everyone = [None] * dist.get_world_size()\n"
        "        dist.all_gather_object(everyone, (mel_losses, gate_losses))\n"))
    findings = lint_project(tmp_path, {"train.py": gathered}, "train.py", select="DDP036")
    assert _lines(findings, "DDP036") == []
    # A list kept from before (`history`), not made for this loop: not known to be the shard's.
    kept = LISTED_LOSSES.replace("def validate(model, criterion, val_loader, step):",
                                 "def validate(model, criterion, val_loader, step, mel_losses=None):").replace(
        "mel_losses, gate_losses = [], []", "gate_losses = []").replace(
        "statistics.mean(gate_losses)", "0.0")
    findings = lint_project(tmp_path, {"train.py": kept}, "train.py", select="DDP036")
    assert _lines(findings, "DDP036") == []


ONE_CYCLE = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=2e-4)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    net = DDP(torch.nn.Linear(16, 16).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.learning_rate)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer,
                                                    max_lr=5e-4,
                                                    steps_per_epoch=100,
                                                    epochs=args.epochs)
    for epoch in range(args.epochs):
        for step in range(100):
            net(torch.randn(8, 16).cuda()).sum().backward()
            optimizer.step()
            scheduler.step()
    dist.destroy_process_group()
"""


def test_one_cycle_peak_is_the_rate_the_run_trains_with(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": ONE_CYCLE}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [19]
    # CyclicLR's peak, by position.
    cyclic = ONE_CYCLE.replace("OneCycleLR(optimizer,\n", "CyclicLR(optimizer, 1e-5,\n").replace(
        "max_lr=5e-4,", "5e-4,").replace("steps_per_epoch=100,", "step_size_up=100,").replace(
        "epochs=args.epochs)", "cycle_momentum=False)")
    findings = lint_project(tmp_path, {"train.py": cyclic}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [19]
    # A peak from the command line, or scaled by the world size: a decision about the global batch.
    flagged = ONE_CYCLE.replace("max_lr=5e-4,", "max_lr=args.learning_rate,")
    findings = lint_project(tmp_path, {"train.py": flagged}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == []
    scaled = ONE_CYCLE.replace("max_lr=5e-4,", "max_lr=5e-4 * dist.get_world_size(),")
    findings = lint_project(tmp_path, {"train.py": scaled}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == []
    # A literal optimizer rate under the same schedule: one finding, at the optimizer.
    both = ONE_CYCLE.replace("lr=args.learning_rate)", "lr=1e-4)")
    findings = lint_project(tmp_path, {"train.py": both}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [17]


CALLABLE_DEFAULT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def report(step, loss, emit=print):
        emit(f"step {step}: {loss:.3f}")


    def main(epochs=3):
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        for step in range(epochs):
            loss = model(torch.randn(2, 4).cuda()).sum()
            loss.backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_callable_parameter_default_is_read_without_looping(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": CALLABLE_DEFAULT})
    r = run_cli("lint", "--no-cache", "--exit-zero", "--select", "ALL", "--output-format", "json",
                str(tmp_path / "train.py"))
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr


FIRE_SEED = """\
    import os

    import fire
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run_training(rank, world_size, seed):
        torch.manual_seed(seed)
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)).cuda()
        model = DDP(net, device_ids=[rank])
        for step in range(100):
            model(torch.randn(4, 8, device=rank)).sum().backward()
        dist.destroy_process_group()


    def train_from_folder(data="./data", seed=42):
        world_size = torch.cuda.device_count()
        mp.spawn(run_training, args=(world_size, seed), nprocs=world_size, join=True)


    def main():
        fire.Fire(train_from_folder)
"""


def test_a_seed_option_fire_fills_is_the_same_on_every_rank(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": FIRE_SEED}, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == [11]


RETURNED_SCORE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def evaluate(model, loader):
        correct = total = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
                total += y.numel()
        return correct / total


    def main(eval_only=False):
        rank = int(os.environ["RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = DDP(torch.nn.Linear(8, 3).cuda())
        val_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
        if not eval_only:
            val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))
            acc = evaluate(model, val_loader)
            if rank == 0:
                print(f"val acc {acc:.3f}")
        else:
            full_loader = DataLoader(val_set, batch_size=8)
            acc = evaluate(model, full_loader)
            if rank == 0:
                print(f"acc {acc:.3f}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        import sys
        main(eval_only="--eval" in sys.argv)
"""


def test_a_returned_score_is_one_shard_only_where_the_caller_hands_a_shard(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": RETURNED_SCORE}, "train.py", select="DDP036")
    assert _lines(findings, "DDP036") == [28]
