"""False findings seen on public scripts of batch 20: each through `ddpcheck lint` on a small
project written in the style of the script, with a variant that must still be reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def found(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in lint_project(tmp_path, files, target, select=select))


# --- DDP011: the ImageNet example's `if args.gpu is None:` resume, with args.gpu always set or not -

RESUME_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", default=None, type=int)
    parser.add_argument("--local_rank", default=-1, type=int)
    parser.add_argument("--resume", action="store_true")


    def main():
        args = parser.parse_args()
        if args.local_rank == -1:
            args.local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group(backend="nccl", init_method="env://")
        torch.cuda.set_device(args.local_rank)
        global_rank = torch.distributed.get_rank()
        {set_gpu}
        main_worker(args.local_rank, global_rank, args)


    def main_worker(local_rank, global_rank, args):
        model = torch.nn.Linear(4, 4).cuda(args.local_rank)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
        if args.resume:
            if args.gpu is None:
                checkpoint = torch.load("checkpoint.pth.tar")
            else:
                loc = "cuda:{}".format(args.local_rank)
                checkpoint = torch.load("checkpoint.pth.tar", map_location=loc)
            model.load_state_dict(checkpoint["state_dict"])
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_load_under_args_gpu_is_none_is_silent_when_the_caller_always_sets_it(tmp_path: Path) -> None:
    # `args.gpu = global_rank` before `main_worker(args)`: the `is None` arm never runs.
    files = {"train.py": RESUME_SCRIPT.replace("{set_gpu}", "args.gpu = global_rank")}
    assert found(tmp_path, files, "DDP011") == []


def test_a_load_under_args_gpu_is_none_is_reported_when_the_option_may_stay_unset(tmp_path: Path) -> None:
    files = {"train.py": RESUME_SCRIPT.replace("{set_gpu}", "pass")}
    assert found(tmp_path, files, "DDP011") == [("train.py", 28)]


def test_a_load_under_args_gpu_is_none_is_reported_when_the_caller_sets_it_on_some_runs(tmp_path: Path) -> None:
    files = {"train.py": RESUME_SCRIPT.replace(
        "{set_gpu}", "if args.local_rank > 0:\n            args.gpu = global_rank")}
    assert found(tmp_path, files, "DDP011") == [("train.py", 29)]


def test_a_load_under_args_gpu_is_none_is_reported_when_the_caller_may_set_none(tmp_path: Path) -> None:
    files = {"train.py": RESUME_SCRIPT.replace("{set_gpu}", "args.gpu = None")}
    assert found(tmp_path, files, "DDP011") == [("train.py", 28)]


# --- DDP007: RANK read only where LOCAL_RANK is absent ------------------------------------------

ENV_SCRIPT = """\
    import os
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed import destroy_process_group
    from setup import ddp_setup


    def train(rank, world_size, num_epochs):
        ddp_setup(rank, world_size)
        model = torch.nn.Linear(2, 2)
        model.to(rank)
        model = DDP(model, device_ids=[rank], output_device=rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for epoch in range(num_epochs):
            features, labels = torch.randn(8, 2).to(rank), torch.randint(0, 2, (8,)).to(rank)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        destroy_process_group()


    def main():
        if "WORLD_SIZE" in os.environ:
            world_size = int(os.environ["WORLD_SIZE"])
        else:
            world_size = 1
        if "{local}" in os.environ:
            rank = int(os.environ["{local}"])
        elif "{glob}" in os.environ:
            rank = int(os.environ["{glob}"])
        else:
            rank = 0
        train(rank, world_size, num_epochs=3)


    if __name__ == "__main__":
        main()
"""

SETUP = """\
    import os
    import torch
    import torch.distributed as dist

    def ddp_setup(rank, world_size):
        torch.cuda.set_device(rank)
        dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
"""


def _env(local: str, glob: str) -> dict[str, str]:
    return {"train.py": ENV_SCRIPT.replace("{local}", local).replace("{glob}", glob), "setup.py": SETUP}


def test_rank_read_only_where_local_rank_is_absent_is_not_the_device_of_a_multi_node_job(tmp_path: Path) -> None:
    assert found(tmp_path, _env("LOCAL_RANK", "RANK"), "DDP007") == []


def test_rank_read_where_another_launchers_local_rank_is_absent_is_reported(tmp_path: Path) -> None:
    # An `srun` job sets SLURM_PROCID and SLURM_LOCALID, never LOCAL_RANK: that arm spans machines.
    assert found(tmp_path, _env("LOCAL_RANK", "SLURM_PROCID"), "DDP007") == [("train.py", 12)]


def test_rank_read_where_a_plain_setting_is_absent_is_reported(tmp_path: Path) -> None:
    assert found(tmp_path, _env("MY_GPU", "RANK"), "DDP007") == [("train.py", 12)]


def test_rank_read_in_the_else_of_a_conditional_expression_on_local_rank_is_silent(tmp_path: Path) -> None:
    script = """\
        import os
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else int(os.environ["RANK"])
        torch.cuda.set_device(rank)
        dist.destroy_process_group()
    """
    assert found(tmp_path, {"train.py": script}, "DDP007") == []


# --- DDP016: sub-batches as large as the loader's batches --------------------------------------

SUB_BATCH_SCRIPT = """\
    import argparse
    import math
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--batches-per-allreduce", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--local_rank", default=0, type=int)
    args = parser.parse_args()


    def train(model, optimizer, train_loader, train_sampler):
        for epoch in range(0, args.epochs):
            train_sampler.set_epoch(epoch)
            for _, (data, target) in enumerate(train_loader):
                data, target = data.cuda(), target.cuda()
                optimizer.zero_grad()
                for i in range(0, len(data), args.batch_size):
                    data_batch = data[i:i + args.batch_size]
                    target_batch = target[i:i + args.batch_size]
                    loss = F.cross_entropy(model(data_batch), target_batch)
                    loss.div_(math.ceil(float(len(data)) / args.batch_size))
                    loss.backward()
                optimizer.step()


    def main():
        dist.init_process_group(backend="nccl", init_method="env://")
        torch.cuda.set_device(args.local_rank)
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[args.local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        train_loader = torch.utils.data.DataLoader(dataset, batch_size={loader_batch}, sampler=train_sampler)
        train(model, optimizer, train_loader, train_sampler)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_sub_batches_of_the_loaders_own_batch_size_make_one_backward_per_step(tmp_path: Path) -> None:
    files = {"train.py": SUB_BATCH_SCRIPT.replace("{loader_batch}", "args.batch_size")}
    assert found(tmp_path, files, "DDP016") == []


def test_sub_batches_of_a_larger_loader_batch_are_accumulation(tmp_path: Path) -> None:
    # Horovod's example: the loader gives batch_size * batches_per_allreduce samples a step.
    files = {"train.py": SUB_BATCH_SCRIPT.replace("{loader_batch}",
                                                  "args.batch_size * args.batches_per_allreduce")}
    assert found(tmp_path, files, "DDP016") == [("train.py", 27)]


def test_sub_batches_of_a_local_step_named_like_the_loaders_are_accumulation(tmp_path: Path) -> None:
    # A local `batch_size` of another function is another value, whatever its name.
    script = SUB_BATCH_SCRIPT.replace("{loader_batch}", "batch_size").replace(
        "args.batch_size", "batch_size").replace(
        "def train(model, optimizer, train_loader, train_sampler):",
        "def train(model, optimizer, train_loader, train_sampler, batch_size=32):").replace(
        "    def main():\n", "    def main():\n        batch_size = 256\n")
    assert found(tmp_path, {"train.py": script}, "DDP016") == [("train.py", 27)]
