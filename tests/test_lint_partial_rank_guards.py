"""Guards that mix a rank test with another condition, and other idioms of code the lint had not
read, through `ddpcheck lint`: each test writes a small project in the style of such code, with
variants that must stay quiet and the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


GUARDED_RAISE = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main(out_dir):
        if GUARD:
            raise RuntimeError("output directory is not empty")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        for step in range(10):
            loss = net(torch.randn(8, 4).cuda()).sum()
            loss.backward()
        dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        main("runs")
"""


def test_leaving_on_rank_0_only_when_another_condition_holds_keeps_every_rank_running(tmp_path: Path) -> None:
    quiet = [
        "dist.get_rank() == 0 and os.path.isdir(out_dir) and len(os.listdir(out_dir)) > 0",
        "os.path.exists(out_dir) and dist.get_rank() == 0",
        "not (dist.get_rank() != 0 or not os.path.exists(out_dir))",
        "dist.get_rank() != 0 and os.environ.get('STRICT') == '1'",
    ]
    for test in quiet:
        source = GUARDED_RAISE.replace("GUARD", test)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP005,DDP009")
        assert findings == [], (test, findings)
    # Leaving on rank 0 alone (or on every other rank) still leaves the rest to the other ranks.
    for test in ("dist.get_rank() == 0", "dist.get_rank() == 0 and dist.is_initialized()"):
        source = GUARDED_RAISE.replace("GUARD", test)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP005,DDP009")
        assert _lines(findings, "DDP009") == [15, 17], (test, findings)
        assert _lines(findings, "DDP005") == [22], (test, findings)


def test_a_rank_0_branch_with_another_condition_is_still_rank_0_code(tmp_path: Path) -> None:
    source = GUARDED_RAISE.replace("        if GUARD:\n            raise RuntimeError(\"output directory is not empty\")\n", "")
    source = source.replace("        dist.barrier()\n",
                            "        if dist.get_rank() == 0 and out_dir:\n            dist.barrier()\n")
    findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [16]


GROUPED_RATES = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.body(x))


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        net = DistributedDataParallel(Net().cuda(), device_ids=[rank])
        opt = torch.optim.SGD(
            [
                {"params": net.module.body.parameters(), "lr": BODY},
                {"params": net.module.head.parameters(), "lr": 1e-3},
            ],
            MAIN
        )
        loss = net(torch.randn(4, 8).cuda()).sum()
        loss.backward()
        opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_an_optimizer_with_several_constant_group_rates_is_reported_once(tmp_path: Path) -> None:
    for body, main in (("1e-4", "momentum=0.9"), ("1e-4", "lr=0.1, momentum=0.9"), ("0.01", "lr=0.1")):
        source = GROUPED_RATES.replace("BODY", body).replace("MAIN", main)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP004")
        assert _lines(findings, "DDP004") == [25], (body, main, findings)
    # A first group scaled by the world size leaves the second group's constant to report.
    source = GROUPED_RATES.replace("BODY", "1e-4 * dist.get_world_size()").replace("MAIN", "momentum=0.9")
    findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP004")
    assert _lines(findings, "DDP004") == [26], findings


UNREAD_FLAG = """\
    import argparse
    import torch
    import torch.distributed as dist
    import slurm_env
    from torch.nn.parallel import DistributedDataParallel


    def parse():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=None)
        parser.add_argument("--epochs", type=int, default=3)
        return parser.parse_args()


    def main():
        args = parse()
        dist.init_process_group("nccl", rank=slurm_env.rank, world_size=slurm_env.size)
        torch.cuda.set_device(slurm_env.local_rank)
        net = DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[slurm_env.local_rank])
        for _ in range(args.epochs):
            net(torch.randn(2, 2).cuda()).sum().backward()
        READ
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_local_rank_flag_nothing_reads_is_not_reported(tmp_path: Path) -> None:
    files = {"train.py": UNREAD_FLAG.replace("READ", "pass"), "slurm_env.py": "rank = 0\nsize = 1\nlocal_rank = 0\n"}
    assert lint_project(tmp_path, files, "train.py", select="DDP008") == []
    # Read through the namespace, by name, or with the whole namespace handed on: reported.
    # (Printed or logged, `print(args.local_rank)`, or saved whole, `print(vars(args))`, it is
    # shown or recorded, read by no entry.)
    for read in ("run(args.local_rank)", "run(getattr(args, 'local_rank'))", "run(**vars(args))",
                 "run(dict(rank=args.local_rank))"):
        files["train.py"] = UNREAD_FLAG.replace("READ", read)
        findings = lint_project(tmp_path, files, "train.py", select="DDP008")
        assert _lines(findings, "DDP008") == [10], (read, findings)
    for shown in ("print(args.local_rank)", "print('Local Rank: {}'.format(args.local_rank), flush=True)",
                  "logger.info(f'local rank {args.local_rank}')"):
        files["train.py"] = UNREAD_FLAG.replace("READ", shown)
        assert lint_project(tmp_path, files, "train.py", select="DDP008") == [], shown


SPAWN_SETS_ITS_OWN_RANK = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers import build_loader


    class Runner:
        def __init__(self):
            self.rank = int(os.environ["RANK"])
            self.device = self.rank
            net = torch.nn.Linear(4, 4).to(self.device)
            self.net = DDP(net, device_ids=[self.device])
            self.loader = build_loader()

        @staticmethod
        def setup(rank, world_size):
            SETUP
            address = ADDRESS
            dist.init_process_group("nccl", init_method=address, rank=rank, world_size=world_size)


    def worker(rank, world_size):
        Runner.setup(rank, world_size)
        runner = Runner()
        for x in runner.loader:
            runner.net(x.to(runner.device)).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n,), nprocs=n)
"""

LOADER_HELPER = """\
import os
import torch


def build_loader():
    rank = int(os.environ["RANK"])
    return [torch.randn(2, 4) + rank]
"""


def test_a_spawned_worker_that_stores_its_rank_in_the_environment_runs_on_one_machine(tmp_path: Path) -> None:
    setup = 'os.environ["WORLD_SIZE"] = str(world_size)\n            os.environ["RANK"] = str(rank)'
    for address in ('"tcp://localhost:23456"', '"tcp://127.0.0.1:23456"'):
        source = SPAWN_SETS_ITS_OWN_RANK.replace("SETUP", setup).replace("ADDRESS", address)
        files = {"train.py": source, "helpers.py": LOADER_HELPER}
        findings = lint_project(tmp_path, files, "train.py", select="DDP007")
        assert findings == [], (address, findings)
    # A rendezvous on another machine, or a rank kept only where no launcher set one: reported.
    for address, own in (('"tcp://10.1.2.3:23456"', setup),
                         ('"tcp://localhost:23456"', 'if "RANK" not in os.environ:\n'
                          '                os.environ["RANK"] = str(rank)')):
        source = SPAWN_SETS_ITS_OWN_RANK.replace("SETUP", own).replace("ADDRESS", address)
        files = {"train.py": source, "helpers.py": LOADER_HELPER}
        findings = lint_project(tmp_path, files, "train.py", select="DDP007")
        assert _lines(findings, "DDP007") == [14], (address, own, findings)


DEMOTED_FLAG = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, net, distributed):
            self.distributed = distributed
            self.chatty = True
            DEMOTE
            self.net = DDP(net.cuda())

        def save(self, name):
            os.makedirs("out", exist_ok=True)
            torch.save(self.net.module.state_dict(), f"out/{name}.pt")

        def fit(self, loader):
            for x in loader:
                self.net(x.cuda()).sum().backward()
            if self.chatty:
                self.save("last")
                print("done")
            dist.barrier()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        Trainer(torch.nn.Linear(2, 2), True).fit([torch.randn(2, 2)])
        dist.destroy_process_group()
"""


def test_a_flag_set_true_then_false_on_the_other_ranks_keeps_to_rank_0(tmp_path: Path) -> None:
    for demote in ("if self.distributed:\n                if dist.get_rank() != 0:\n"
                   "                    self.chatty = False",
                   "if dist.get_rank() > 0:\n                self.chatty = None",
                   "if int(os.environ['RANK']) != 0:\n                self.chatty = False"):
        source = DEMOTED_FLAG.replace("DEMOTE", demote)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP010,DDP020")
        assert findings == [], (demote, findings)
    # Turned off on some other condition: the flag says nothing of the rank.
    for demote in ("if os.environ.get('QUIET'):\n                self.chatty = False",):
        source = DEMOTED_FLAG.replace("DEMOTE", demote)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP010")
        assert _lines(findings, "DDP010") == [17], (demote, findings)


SAMPLER_COUNTS_BATCHES = """\
    import math
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class EvenSampler(torch.utils.data.Sampler):
        def __init__(self, data, batch_size):
            self.data = data
            self.batch_size = batch_size
            self.num_replicas = dist.get_world_size()
            self.num_samples = SPLIT

        def __iter__(self):
            return iter(range(dist.get_rank(), len(self.data), self.num_replicas))

        def __len__(self):
            return self.num_samples


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(net.parameters(), lr=0.001)
        data = torch.randn(64, 4)
        for i in EvenSampler(data, 16):
            net(data[i:i + 1].cuda()).sum().backward()
            opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_batch_size_that_divides_the_data_is_not_a_batch_split_across_ranks(tmp_path: Path) -> None:
    for split in ("int(math.ceil(len(data) * 1.0 / self.batch_size / self.num_replicas)) * self.batch_size",
                  "len(data) // self.batch_size // self.num_replicas"):
        source = SAMPLER_COUNTS_BATCHES.replace("SPLIT", split)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP004")
        assert _lines(findings, "DDP004") == [27], (split, findings)
    # The per-rank batch taken from a global one: the rate is meant for the global batch.
    for split in ("self.batch_size // self.num_replicas", "self.batch_size // dist.get_world_size()"):
        source = SAMPLER_COUNTS_BATCHES.replace("SPLIT", split)
        assert lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP004") == [], split


EPOCH_IN_BAR_BRANCH = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from tqdm import tqdm


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        args.local_rank = local_rank
        net = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        data = TensorDataset(torch.randn(64, 4))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        for epoch in range(args.epochs):
            if GUARD:
                steps = tqdm(loader, desc=f"epoch {epoch}")
                sampler.set_epoch(epoch)
            else:
                steps = loader
            for (x,) in steps:
                net(x.cuda()).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=2)
        parser.add_argument("--verbose", action="store_true")
        main(parser.parse_args())
"""


def test_set_epoch_called_on_rank_0_only_leaves_the_other_ranks_unshuffled(tmp_path: Path) -> None:
    for guard in ("args.local_rank <= 0 and args.verbose", "args.local_rank <= 0", "dist.get_rank() < 1",
                  "dist.get_rank() == 0"):
        source = EPOCH_IN_BAR_BRANCH.replace("GUARD", guard)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP002")
        assert _lines(findings, "DDP002") == [19], (guard, findings)
    # On every rank (a flag every rank shares): the order changes each epoch.
    for guard in ("args.verbose", "dist.is_initialized()"):
        source = EPOCH_IN_BAR_BRANCH.replace("GUARD", guard)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP002")
        assert _lines(findings, "DDP002") == [], (guard, findings)


SHARED_PARSER = """\
import argparse

parser = argparse.ArgumentParser(description="video training options")
parser.add_argument("--epochs", type=int, default=30)
parser.add_argument("--local_rank", type=int, default=0)
"""

PARSER_USER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from options import parser


    def main():
        args = parser.parse_args()
        dist.init_process_group("nccl")
        torch.cuda.set_device(USE)
        net = DistributedDataParallel(torch.nn.Linear(3, 3).cuda())
        for _ in range(args.epochs):
            net(torch.randn(2, 3).cuda()).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_local_rank_flag_on_a_parser_imported_from_another_module(tmp_path: Path) -> None:
    files = {"train.py": PARSER_USER.replace("USE", "args.local_rank"), "options.py": SHARED_PARSER}
    findings = lint_project(tmp_path, files, "train.py", select="DDP008")
    assert [(f["path"].rsplit("/", 1)[-1], f["location"]["line"]) for f in findings] == [("options.py", 5)]
    # A LOCAL_RANK read left in a comment is no read.
    files["train.py"] = files["train.py"].replace("    def main():\n",
                                                  '    # local_rank = int(os.environ["LOCAL_RANK"])\n    def main():\n')
    findings = lint_project(tmp_path, files, "train.py", select="DDP008")
    assert [(f["path"].rsplit("/", 1)[-1], f["location"]["line"]) for f in findings] == [("options.py", 5)]
    # The parser module falls back on LOCAL_RANK, or nothing reads the flag: quiet.
    files["options.py"] = SHARED_PARSER.replace("default=0", 'default=int(os.environ.get("LOCAL_RANK", 0))')
    files["options.py"] = "import os\n" + files["options.py"]
    assert lint_project(tmp_path, files, "train.py", select="DDP008") == []
    files = {"train.py": PARSER_USER.replace("USE", "dist.get_rank() % torch.cuda.device_count()"),
             "options.py": SHARED_PARSER}
    assert lint_project(tmp_path, files, "train.py", select="DDP008") == []


OFFSET_DEVICE = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--first-gpu", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        device = torch.device("cuda", INDEX)
        torch.cuda.set_device(device)
        net = DDP(torch.nn.Linear(2, 2).to(device), device_ids=[device.index])
        net(torch.randn(1, 2, device=device)).sum().backward()
        dist.destroy_process_group()
"""


def test_a_global_rank_shifted_by_an_offset_is_still_the_global_rank(tmp_path: Path) -> None:
    for index in ("dist.get_rank() + args.first_gpu", "args.first_gpu + dist.get_rank()",
                  "dist.get_rank() + 1"):
        findings = lint_project(tmp_path, {"train.py": OFFSET_DEVICE.replace("INDEX", index)}, "train.py",
                                select="DDP007")
        assert _lines(findings, "DDP007") == [12], (index, findings)
    for index in ("dist.get_rank() % torch.cuda.device_count() + args.first_gpu",
                  "int(os.environ['LOCAL_RANK']) + args.first_gpu"):
        source = OFFSET_DEVICE.replace("INDEX", index).replace("import argparse", "import argparse, os")
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP007,DDP900")
        assert findings == [], (index, findings)


UPDATE_FLAG = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(args, net, loader, opt):
        for j, (x, y) in enumerate(loader):
            FLAG
            loss = torch.nn.functional.mse_loss(net(x.cuda()), y.cuda())
            loss.backward()
            if need_update:
                opt.step()
                opt.zero_grad()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--update_freq", type=int, default=4)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(3, 1).cuda(), device_ids=[local_rank])
        opt = torch.optim.SGD(net.parameters(), lr=0.1 * dist.get_world_size())
        train(args, net, [(torch.randn(2, 3), torch.randn(2, 1))], opt)
        dist.destroy_process_group()
"""


def test_a_step_under_a_flag_set_from_the_micro_batch_counter_accumulates(tmp_path: Path) -> None:
    for flag in ("need_update = True if (j + 1) % args.update_freq == 0 else False",
                 "need_update = (j + 1) % args.update_freq == 0",
                 "if args.update_freq == 1:\n                need_update = True\n            else:\n"
                 "                need_update = (j + 1) % args.update_freq == 0"):
        source = UPDATE_FLAG.replace("FLAG", flag)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP016")
        assert len(_lines(findings, "DDP016")) == 1, (flag, findings)
    # A flag that has nothing to do with a counter: a step after every backward.
    for flag in ("need_update = torch.isfinite(x).all()", "need_update = True"):
        source = UPDATE_FLAG.replace("FLAG", flag)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP016")
        assert findings == [], (flag, findings)


SHARED_VISIBLE_DEVICES = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(rank, world_size, gpus):
        PIN
        dist.init_process_group("nccl", init_method="tcp://localhost:23456", rank=rank, world_size=world_size)
        net = DDP(torch.nn.Linear(2, 2).to(rank), device_ids=[rank])
        net(torch.randn(2, 2).to(rank)).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        gpus = [0, 1, 2, 3]
        VISIBLE
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n, gpus), nprocs=n)
"""


def test_visible_devices_listing_several_gpus_pins_no_process(tmp_path: Path) -> None:
    for visible in ('os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)',
                    'os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"'):
        source = SHARED_VISIBLE_DEVICES.replace("VISIBLE", visible).replace("PIN", "pass")
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP003")
        assert _lines(findings, "DDP003") == [10], (visible, findings)
    # One GPU per process, a value from the command line, or set_device in the worker: quiet.
    shared = 'os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"'
    for visible, pin in ((shared, 'os.environ["CUDA_VISIBLE_DEVICES"] = str(gpus[rank])'),
                         ('os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("GPUS", "0")', "pass"),
                         (shared, "torch.cuda.set_device(rank)")):
        source = SHARED_VISIBLE_DEVICES.replace("VISIBLE", visible).replace("PIN", pin)
        findings = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP003,DDP900")
        assert findings == [], (visible, pin, findings)


RESUME = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
        state = torch.load("last.pt", map_location=MAP)
        net.module.load_state_dict(state["model"])
        dist.destroy_process_group()
"""


def test_a_map_location_keyed_by_bare_cuda_moves_nothing(tmp_path: Path) -> None:
    for mapping in ('{"cuda": "cpu"}', "{'cuda': f'cuda:{local_rank}'}"):
        findings = lint_project(tmp_path, {"train.py": RESUME.replace("MAP", mapping)}, "train.py", select="DDP011")
        assert _lines(findings, "DDP011") == [12], (mapping, findings)
        assert "bare key" in findings[0]["message"]
    for mapping in ('{"cuda:0": "cpu"}', '"cpu"', "{'cuda:0': f'cuda:{local_rank}', 'cuda': 'cpu'}",
                    "lambda storage, loc: storage"):
        findings = lint_project(tmp_path, {"train.py": RESUME.replace("MAP", mapping)}, "train.py", select="DDP011")
        assert findings == [], (mapping, findings)


WARM_UP_HELPER = """\
import torch


def warm_up(model, device):
    model = torch.compile(model)
    loss = model(torch.randn(2, 4, device=device)).sum()
    loss.backward()
    return model
"""

WARM_UP_USER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from helpers import warm_up


    def run(device):
        model = torch.nn.Linear(4, 1).to(device)
        BEFORE
        model = DDP(model, device_ids=[device.index])
        AFTER
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        for _ in range(3):
            model(torch.randn(2, 4, device=device)).sum().backward()
            opt.step()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        run(device)
        dist.destroy_process_group()
"""


def test_a_warm_up_forward_in_a_helper_called_before_the_wrap_is_not_training_the_inner_module(
        tmp_path: Path) -> None:
    source = WARM_UP_USER.replace("BEFORE", "model = warm_up(model, device)").replace("AFTER", "pass")
    findings = lint_project(tmp_path, {"train.py": source, "helpers.py": WARM_UP_HELPER}, "train.py", select="DDP013")
    assert findings == []
    # Called on the inner module after the wrap, in the training loop: reported where the loop
    # hands the helper `model.module` (the helper itself is right for a plain model).
    source = WARM_UP_USER.replace("BEFORE", "pass").replace(
        "            opt.step()", "            warm_up(model.module, device)\n            opt.step()").replace(
        "AFTER", "pass")
    helper = WARM_UP_HELPER.replace("    model = torch.compile(model)\n", "")
    findings = lint_project(tmp_path, {"train.py": source, "helpers.py": helper}, "train.py", select="DDP013")
    assert [(f["path"].rsplit("/", 1)[-1], f["location"]["line"]) for f in findings] == [("train.py", 16)], findings
    # The same helper without compiling, called before the wrap: quiet too.
    source = WARM_UP_USER.replace("BEFORE", "model = warm_up(model, device)").replace("AFTER", "pass")
    findings = lint_project(tmp_path, {"train.py": source, "helpers.py": helper}, "train.py", select="DDP013")
    assert findings == []


SAVE_EVERY = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        master = dist.get_rank() == 0
        net = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
        steps = 100
        for step in range(steps + 1):
            last = step == steps
            if GUARD:
                torch.save(net.module.state_dict(), f"step{step}.pt")
        dist.destroy_process_group()
"""


def test_a_rank_0_test_joined_to_a_disjunction_of_other_conditions_keeps_to_rank_0(tmp_path: Path) -> None:
    for guard in ("master and (last or step % 10 == 0)", "(last or step % 10 == 0) and master",
                  "dist.get_rank() == 0 and (last or (steps > 0 and step % 10 == 0))"):
        findings = lint_project(tmp_path, {"train.py": SAVE_EVERY.replace("GUARD", guard)}, "train.py", select="DDP010")
        assert findings == [], (guard, findings)
    findings = lint_project(tmp_path, {"train.py": SAVE_EVERY.replace("GUARD", "last or step % 10 == 0")}, "train.py",
                            select="DDP010")
    assert _lines(findings, "DDP010") == [17]


SPAWNED_OPTIONS = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel


    def worker(index, gpus, opts):
        OVERWRITE
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29511", rank=index, world_size=gpus)
        torch.cuda.set_device(opts["local_rank"])
        net = DistributedDataParallel(torch.nn.Linear(8, 8).cuda(), device_ids=[opts["local_rank"]])
        for _ in range(10):
            net(torch.randn(4, 8, device="cuda")).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        parser.add_argument("--gpus", type=int, default=2)
        opts = vars(parser.parse_args())
        START
"""


def test_a_local_rank_flag_a_spawned_worker_overwrites_with_its_index_is_not_reported(tmp_path: Path) -> None:
    spawn = 'mp.spawn(worker, nprocs=opts["gpus"], args=(opts["gpus"], opts))'
    files = {"train.py": SPAWNED_OPTIONS.replace("OVERWRITE", 'opts["local_rank"] = index').replace("START", spawn)}
    assert lint_project(tmp_path, files, "train.py", select="DDP008") == []
    # The namespace kept as it is, its attribute overwritten.
    as_namespace = SPAWNED_OPTIONS.replace("opts = vars(", "opts = (").replace(
        'opts["local_rank"]', "opts.local_rank").replace('opts["gpus"]', "opts.gpus")
    files["train.py"] = as_namespace.replace("OVERWRITE", "opts.local_rank = index").replace(
        "START", "mp.spawn(worker, nprocs=opts.gpus, args=(opts.gpus, opts))")
    assert lint_project(tmp_path, files, "train.py", select="DDP008") == []
    # Never overwritten: the launcher's flag is what each process reads.
    files["train.py"] = SPAWNED_OPTIONS.replace("OVERWRITE", "pass").replace("START", spawn)
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP008"), "DDP008") == [21]
    # Overwritten, but no process of its own is started: the launcher starts them and passes the flag.
    files["train.py"] = SPAWNED_OPTIONS.replace("OVERWRITE", 'opts["local_rank"] = index').replace(
        "START", 'worker(0, opts["gpus"], opts)')
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP008"), "DDP008") == [21]
