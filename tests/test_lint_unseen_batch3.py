"""False findings met on a fresh batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, with the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


SPAWN_WITH_FLAG = """\
    import os
    import torch
    import torch.multiprocessing as mp
    from torch.distributed import init_process_group
    from torch.utils.data import DataLoader, DistributedSampler


    def make_loader(dataset, batch_size, use_ddp: bool):
        if use_ddp == True:
            return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset))
        else:
            return DataLoader(dataset, batch_size, shuffle=True)


    def worker(rank, world, use_ddp):
        if use_ddp:
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "29511"
            init_process_group("gloo", rank=rank, world_size=world)
        loader = make_loader(torch.arange(64.0), 8, use_ddp)
        for _ in loader:
            pass


    if __name__ == "__main__":
        mp.spawn(worker, args=(2, True), nprocs=2)
"""


def test_the_loader_of_the_branch_a_flag_compared_to_false_takes_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SPAWN_WITH_FLAG}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # Compared the other way round, the shuffled loader is the distributed one: reported.
    flipped = SPAWN_WITH_FLAG.replace("use_ddp == True", "use_ddp == False")
    findings = lint_project(tmp_path, {"train.py": flipped}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [12]


PAIRED_LOADERS = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def main(distributed: bool):
        train_set = TensorDataset(torch.randn(64, 4))
        held_out = TensorDataset(torch.randn(16, 4))
        if distributed:
            dist.init_process_group("nccl")
            sampler = DistributedSampler(train_set)
        else:
            sampler = None
        train_loader, val_loader = DataLoader(train_set, batch_size=8, sampler=sampler, shuffle=not distributed), \\
                                   DataLoader(held_out, batch_size=8)
        return train_loader, val_loader


    if __name__ == "__main__":
        main(True)
"""


def test_loaders_built_in_one_tuple_assignment_are_named_by_their_own_targets(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": PAIRED_LOADERS}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    # The training loader without its sampler is still reported, on its own line.
    bare = PAIRED_LOADERS.replace("sampler=sampler, shuffle=not distributed", "shuffle=True")
    findings = lint_project(tmp_path, {"train.py": bare}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [14]


SELF_SHARDING = """\
    import pickle
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset, RandomSampler


    class TokenBlocks(Dataset):
        def __init__(self, path, args):
            rank = args.local_rank if args.local_rank != -1 else 0
            world = dist.get_world_size() if args.local_rank != -1 else 1
            with open(path, "rb") as handle:
                rows = pickle.load(handle)
            self.rows = [r for i, r in enumerate(rows) if i % world == rank]

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            return torch.tensor(self.rows[i])


    def train(args):
        dist.init_process_group("nccl")
        data = TokenBlocks(args.data, args)
        loader = DataLoader(data, sampler=RandomSampler(data), batch_size=4)
        for _ in loader:
            pass
"""


def test_a_dataset_that_keeps_its_own_ranks_rows_needs_no_sampler(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SELF_SHARDING}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    whole = SELF_SHARDING.replace("if i % world == rank]", "]")
    findings = lint_project(tmp_path, {"train.py": whole}, "train.py", select="DDP001")
    assert _lines(findings, "DDP001") == [25]


SPLIT_FILES = {
    "corpus/__init__.py": "",
    "corpus/loading.py": """\
        import glob
        import numpy as np
        import torch
        import torch.distributed as dist


        def _read(folder):
            files = sorted(glob.glob(folder + "/*.pt"))
            mine = np.array_split(files, dist.get_world_size())[dist.get_rank()]
            return torch.cat([torch.load(f, map_location="cpu") for f in mine])


        def load_corpus(folder):
            rows = _read(folder)
            return torch.utils.data.TensorDataset(rows)
    """,
    "pretrain.py": """\
        import torch.distributed as dist
        from torch.utils.data import DataLoader, RandomSampler
        from corpus import loading


        def main(folder):
            dist.init_process_group("nccl")
            corpus = loading.load_corpus(folder)
            loader = DataLoader(corpus, sampler=RandomSampler(corpus), batch_size=16)
            for _ in loader:
                pass


        if __name__ == "__main__":
            main("shards")
    """,
}


def test_a_builder_that_loads_only_its_ranks_files_needs_no_sampler(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, SPLIT_FILES, "pretrain.py", select="DDP001")
    assert _lines(findings, "DDP001") == []
    whole = dict(SPLIT_FILES)
    whole["corpus/loading.py"] = SPLIT_FILES["corpus/loading.py"].replace(
        "np.array_split(files, dist.get_world_size())[dist.get_rank()]", "files")
    findings = lint_project(tmp_path, whole, "pretrain.py", select="DDP001")
    assert _lines(findings, "DDP001") == [9]


NODE_FIRST_RANK = """\
    import argparse
    import logging
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def worker(gpu, args):
        rank = args.first_rank + gpu
        dist.init_process_group("nccl", init_method=args.url, rank=rank, world_size=args.world)
        logging.basicConfig(level=logging.INFO)
        logger = logging.getLogger(__name__)
        policy = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.Adam(policy.parameters())
        for update in range(args.updates):
            loss = policy(torch.randn(4, 8, device=gpu)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == args.first_rank:
                logger.info("update %d: loss %.3f", update, loss.item())


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--first-rank", type=int, default=0)
        parser.add_argument("--url", default="env://")
        parser.add_argument("--world", type=int, default=2)
        parser.add_argument("--updates", type=int, default=10)
        mp.spawn(worker, args=(parser.parse_args(),), nprocs=2)
"""


def test_a_rank_compared_to_a_configured_rank_is_a_one_rank_guard(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": NODE_FIRST_RANK}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # Without the guard every process logs each update.
    bare = NODE_FIRST_RANK.replace("if rank == args.first_rank:", "if update % 10 == 0:")
    findings = lint_project(tmp_path, {"train.py": bare}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [21]


QUIET_LOGGER = {
    "tools.py": """\
        import logging
        import torch.distributed as dist


        def _gate(logger, level, show):
            original = getattr(logger, level)

            def gated(*args, **kwargs):
                if show or kwargs.pop("everywhere", False):
                    original(*args, **kwargs)

            logger.__setattr__(level, gated)


        def build_logger():
            logging.basicConfig(level=logging.INFO)
            logger = logging.getLogger()
            show = not dist.is_initialized() or dist.get_rank() == 0
            for level in ("debug", "info", "warning"):
                _gate(logger, level, show)
            return logger
    """,
    "train.py": """\
        import torch
        import torch.distributed as dist
        from tools import build_logger


        def main():
            dist.init_process_group("nccl")
            logger = build_logger()
            net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            for epoch in range(3):
                net(torch.randn(2, 4)).sum().backward()
                optimizer.step()
                logger.info("epoch %d done", epoch)


        if __name__ == "__main__":
            main()
    """,
}


def test_a_logger_whose_methods_are_swapped_for_a_gate_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, QUIET_LOGGER, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # Without the swap every rank logs each epoch.
    plain = dict(QUIET_LOGGER)
    plain["tools.py"] = QUIET_LOGGER["tools.py"].replace("logger.__setattr__(level, gated)", "del gated")
    findings = lint_project(tmp_path, plain, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [14]


VALIDATE_WHEN_DUE = """\
    import os
    import torch
    import torch.distributed as dist


    def validate(net):
        print("validation loss", net(torch.zeros(1, 4)).item())


    def train(args, net, optimizer):
        for step in range(args.steps):
            net(torch.randn(8, 4)).sum().backward()
            optimizer.step()
            if args.distributed:
                due = dist.get_rank() == 0 and step % args.every == 0
            else:
                due = step % args.every == 0
            if due:
                validate(net)


    def main(args):
        args.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        if args.distributed:
            dist.init_process_group("nccl")
        net = torch.nn.Linear(4, 1)
        if args.distributed:
            net = torch.nn.parallel.DistributedDataParallel(net)
        train(args, net, torch.optim.SGD(net.parameters(), lr=0.1))
"""


def test_a_flag_that_is_a_rank_test_on_the_distributed_path_guards_like_one(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": VALIDATE_WHEN_DUE}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # The rank test dropped from the distributed arm: every rank validates and prints.
    loose = VALIDATE_WHEN_DUE.replace("dist.get_rank() == 0 and step", "step")
    findings = lint_project(tmp_path, {"train.py": loose}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [19]


SPAWN_ON_LOCALHOST = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def worker(index, world_size):
        dist.init_process_group("nccl", rank=index, world_size=world_size)
        torch.cuda.set_device(torch.device("cuda", dist.get_rank()))
        net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).cuda(), device_ids=[dist.get_rank()])
        net(torch.randn(2, 4).cuda()).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        gpus = torch.cuda.device_count()
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29533"
        mp.spawn(worker, args=(gpus,), nprocs=gpus)
"""


def test_the_global_rank_of_a_spawn_job_on_localhost_is_the_local_gpu(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SPAWN_ON_LOCALHOST}, "train.py", select="DDP007")
    assert _lines(findings, "DDP007") == []
    # Meeting on another machine's address, the job can span nodes: reported.
    remote = SPAWN_ON_LOCALHOST.replace('"localhost"', 'os.environ.get("HEAD_NODE", "localhost")')
    findings = lint_project(tmp_path, {"train.py": remote}, "train.py", select="DDP007")
    assert _lines(findings, "DDP007") == [9, 10]


REWRAP_PER_STAGE = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def fit(net, steps):
        optimizer = torch.optim.Adam(net.parameters())
        for _ in range(steps):
            net(torch.randn(4, 8, device="cuda")).sum().backward()
            optimizer.step()


    def main(local_rank, stages):
        dist.init_process_group("nccl")
        device = torch.device("cuda", local_rank)
        net = torch.nn.Linear(8, 1).cuda(local_rank)
        wrapped = DDP(net, device_ids=[local_rank])
        fit(wrapped, 10)
        for stage in stages:
            net.load_state_dict(torch.load(stage, map_location="cpu"))
            net.to(device)
            wrapped = DDP(net, device_ids=[local_rank])
            fit(wrapped, 10)
"""


def test_a_move_before_the_module_is_wrapped_again_is_not_a_move_after_the_wrap(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": REWRAP_PER_STAGE}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == []
    # Without the second wrap the move acts on the module inside the first wrapper: reported.
    kept = REWRAP_PER_STAGE.replace("            wrapped = DDP(net, device_ids=[local_rank])\n", "")
    findings = lint_project(tmp_path, {"train.py": kept}, "train.py", select="DDP014")
    assert _lines(findings, "DDP014") == [21]


SEED_HELPER_TWICE = """\
    import argparse
    import random
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def seed_everything(opts):
        random.seed(opts.seed)
        torch.manual_seed(opts.seed)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=13)
        opts = parser.parse_args()
        dist.init_process_group("nccl")
        seed_everything(opts)
        data = TensorDataset(torch.randn(64, 8))
        loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=8, num_workers=2)
        net = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(8, 1)))
        seed_everything(opts)
        for (x,) in loader:
            net(x).sum().backward()


    if __name__ == "__main__":
        main()
"""


def test_a_seeding_helper_called_twice_is_one_finding(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SEED_HELPER_TWICE}, "train.py", select="DDP029")
    assert _lines(findings, "DDP029") == [18]


CONFIG_ITEM_FLAG = """\
    import logging
    import torch
    import torch.distributed as dist


    class Options(dict):
        def __getattr__(self, key):
            return self[key]


    class Trainer:
        def __init__(self, params):
            self.params = params
            self.model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

        def train(self):
            for epoch in range(self.params.epochs):
                self.model(torch.randn(2, 4)).sum().backward()
                self.optimizer.step()
                if self.params.verbose:
                    logging.info("epoch %d done", epoch)


    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO)
        params = Options(epochs=3, verbose=True)
        dist.init_process_group("nccl")
        params["verbose"] = dist.get_rank() == 0 and params["verbose"]
        Trainer(params).train()
"""


def test_a_config_item_set_to_a_rank_test_guards_where_it_is_read_as_an_attribute(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": CONFIG_ITEM_FLAG}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []
    # The item set without the rank test: every rank logs.
    loose = CONFIG_ITEM_FLAG.replace('dist.get_rank() == 0 and params["verbose"]', 'params["verbose"] and dist.is_initialized()')
    findings = lint_project(tmp_path, {"train.py": loose}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [22]
