"""The global rank reaching the GPU index by ways launcher scripts write it, through `ddpcheck
lint`: an attribute the caller sets before handing the object on, and a `map_location` table
kept in a variable. Each with the variants that stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict]) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == "DDP007")


CALLER_SETS_ATTRIBUTE = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def fit(opts):
        net = torch.nn.Linear(16, 4)
        torch.cuda.set_device(opts.gpu)
        net = DDP(net.cuda(opts.gpu), device_ids=[opts.gpu])
        return net


    def run(opts):
        dist.init_process_group(backend="nccl")
        opts.gpu = dist.get_rank()
        fit(opts)
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", type=int, default=0)
        run(parser.parse_args())
"""


def test_the_global_rank_a_caller_sets_on_the_arguments_is_the_callees_device(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": CALLER_SETS_ATTRIBUTE}, "train.py", select="DDP007")
    assert _lines(findings) == [9]
    assert "2 more places" in next(f["message"] for f in findings if f["code"] == "DDP007")


def test_a_local_rank_the_caller_sets_on_the_arguments_is_not_reported(tmp_path: Path) -> None:
    local = CALLER_SETS_ATTRIBUTE.replace(
        "opts.gpu = dist.get_rank()", 'opts.gpu = int(os.environ["LOCAL_RANK"])').replace(
        "import argparse", "import argparse\nimport os")
    assert _lines(lint_project(tmp_path, {"train.py": local}, "train.py", select="DDP007")) == []
    folded = CALLER_SETS_ATTRIBUTE.replace(
        "opts.gpu = dist.get_rank()", "opts.gpu = dist.get_rank() % torch.cuda.device_count()")
    assert _lines(lint_project(tmp_path, {"train.py": folded}, "train.py", select="DDP007")) == []


def test_an_attribute_the_caller_sets_only_after_the_call_is_not_the_callees_value(tmp_path: Path) -> None:
    after = CALLER_SETS_ATTRIBUTE.replace(
        "        opts.gpu = dist.get_rank()\n        fit(opts)\n",
        "        fit(opts)\n        opts.gpu = dist.get_rank()\n")
    assert _lines(lint_project(tmp_path, {"train.py": after}, "train.py", select="DDP007")) == []


SPAWNED_ON_ONE_MACHINE = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def fit(opts):
        torch.cuda.set_device(opts.gpu)


    def worker(index, opts, world):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29533"
        dist.init_process_group("nccl", rank=index, world_size=world)
        opts.gpu = dist.get_rank()
        fit(opts)


    if __name__ == "__main__":
        world = torch.cuda.device_count()
        mp.spawn(worker, args=(object(), world), nprocs=world)
"""


def test_a_spawn_only_job_on_one_machine_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": SPAWNED_ON_ONE_MACHINE}, "train.py", select="DDP007")
    assert _lines(findings) == []


CHECKPOINT_TABLE = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def setup():
        dist.init_process_group(backend="nccl")


    def main(resume):
        setup()
        net = torch.nn.Linear(8, 8).cuda()
        if resume:
            remap = {"cuda:%d" % 0: "cuda:%d" % dist.get_rank()}
            net.load_state_dict(torch.load(resume, map_location=remap))
        net = DDP(net)
        torch.save(net.state_dict(), "last.pt")


    if __name__ == "__main__":
        main("init.pt")
"""


def test_a_map_location_table_that_targets_the_global_rank_is_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": CHECKPOINT_TABLE}, "train.py", select="DDP007")
    assert _lines(findings) == [15]
    inline = CHECKPOINT_TABLE.replace(
        "map_location=remap", 'map_location={"cuda:0": f"cuda:{dist.get_rank()}"}')
    assert _lines(lint_project(tmp_path, {"train.py": inline}, "train.py", select="DDP007")) == [15]


def test_a_map_location_table_that_targets_the_local_gpu_is_not_reported(tmp_path: Path) -> None:
    local = CHECKPOINT_TABLE.replace(
        '"cuda:%d" % dist.get_rank()', '"cuda:%d" % int(os.environ["LOCAL_RANK"])').replace(
        "import torch\n", "import os\nimport torch\n", 1)
    assert _lines(lint_project(tmp_path, {"train.py": local}, "train.py", select="DDP007")) == []
    folded = CHECKPOINT_TABLE.replace(
        '"cuda:%d" % dist.get_rank()', '"cuda:%d" % (dist.get_rank() % torch.cuda.device_count())')
    assert _lines(lint_project(tmp_path, {"train.py": folded}, "train.py", select="DDP007")) == []


GPU_BLOCKS = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def fit(cfg):
        per_proc = torch.cuda.device_count() // cfg.local_world_size
        gpus = list(range(cfg.rank * per_proc, (cfg.rank + 1) * per_proc))
        torch.cuda.set_device(gpus[0])
        net = DDP(torch.nn.Linear(4, 4).cuda(gpus[0]), device_ids=gpus)
        return net


    def main(cfg):
        dist.init_process_group("nccl")
        cfg.rank = dist.get_rank()
        fit(cfg)
"""


def test_the_first_gpu_of_a_block_numbered_by_the_global_rank_is_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": GPU_BLOCKS}, "train.py", select="DDP007")
    assert _lines(findings) == [10]


def test_gpu_blocks_numbered_by_the_local_rank_or_shared_by_the_whole_job_are_not_reported(tmp_path: Path) -> None:
    local = GPU_BLOCKS.replace("cfg.rank = dist.get_rank()", 'cfg.rank = int(os.environ["LOCAL_RANK"])')
    assert _lines(lint_project(tmp_path, {"train.py": local}, "train.py", select="DDP007")) == []
    # The GPUs divided among every process of the job: the block stays within the machine.
    whole_job = GPU_BLOCKS.replace("cfg.local_world_size", "dist.get_world_size()")
    assert _lines(lint_project(tmp_path, {"train.py": whole_job}, "train.py", select="DDP007")) == []


COMPOSED_RANK = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(gpu, ngpus_per_node, args):
        args.gpu = gpu
        args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group("nccl", init_method=args.dist_url, world_size=args.world_size,
                                rank=args.rank)
        net = torch.nn.Linear(16, 4)
        if args.resume:
            net.load_state_dict(torch.load(args.resume, map_location={device}))
        torch.cuda.set_device(args.gpu)
        net = DDP(net.cuda(args.gpu), device_ids=[args.gpu])
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--dist-url", default="tcp://10.1.0.1:23456")
        parser.add_argument("--rank", type=int, default=0, help="machine number")
        parser.add_argument("--world-size", type=int, default=1, help="machines")
        parser.add_argument("--resume", default="")
        args = parser.parse_args()
        n = torch.cuda.device_count()
        args.world_size = n * args.world_size
        mp.spawn(worker, nprocs=n, args=(n, args))
"""


def test_the_rank_a_spawn_script_composes_from_the_machine_number_is_global(tmp_path: Path) -> None:
    for device in ("torch.device(args.rank)", 'f"cuda:{args.rank}"', 'torch.device("cuda", args.rank)'):
        findings = lint_project(tmp_path, {"train.py": COMPOSED_RANK.format(device=device)}, "train.py",
                                select="DDP007")
        assert _lines(findings) == [15], device
        assert "args.rank * ngpus_per_node + gpu" in findings[0]["message"]


def test_the_spawn_index_beside_a_composed_rank_is_not_reported(tmp_path: Path) -> None:
    for device in ("torch.device(args.gpu)", 'f"cuda:{gpu}"', '"cpu"'):
        findings = lint_project(tmp_path, {"train.py": COMPOSED_RANK.format(device=device)}, "train.py",
                                select="DDP007")
        assert _lines(findings) == [], device


def test_a_sum_that_is_not_machines_times_their_gpus_is_not_reported(tmp_path: Path) -> None:
    # An offset times a count read from the configuration, not the GPUs of a machine.
    source = COMPOSED_RANK.replace("args.rank * ngpus_per_node + gpu", "args.rank * args.stride + gpu")
    findings = lint_project(tmp_path, {"train.py": source.format(device="torch.device(args.rank)")}, "train.py",
                            select="DDP007")
    assert _lines(findings) == []


SLURM_LOOPBACK = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def setup(rank, world_size):
        ADDRESS
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)


    def train(rank, world_size):
        setup(rank, world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(8, 2).to(rank), device_ids=[rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        train(int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]))
"""


def test_a_launched_job_that_overwrites_the_address_with_localhost_runs_on_one_machine(tmp_path: Path) -> None:
    # Ranks on a second machine would look for rank 0 on their own host: the job cannot span
    # machines, so the global rank is the local one.
    source = SLURM_LOOPBACK.replace("ADDRESS", 'os.environ["MASTER_ADDR"] = "localhost"')
    assert _lines(lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP007")) == []


def test_a_launched_job_that_only_defaults_the_address_can_span_machines(tmp_path: Path) -> None:
    source = SLURM_LOOPBACK.replace(
        "ADDRESS", 'if "MASTER_ADDR" not in os.environ:\n            os.environ["MASTER_ADDR"] = "localhost"')
    assert _lines(lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP007")) == [17]


# A torchrun script whose set-up helper, in another module, points the rendezvous at this
# machine on every path: the job cannot span machines, so its global rank is a local index.
SETUP_HELPER = """\
    import os
    import torch.distributed as dist


    def setup_norank(world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl")
"""

SETUP_CALLER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils import setup_norank


    def main():
        setup_norank(torch.cuda.device_count())
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(8, 2).cuda(rank), device_ids=[rank])
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_set_up_helper_that_pins_the_rendezvous_to_this_machine_leaves_one_machine(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": SETUP_CALLER, "utils.py": SETUP_HELPER}, "train.py",
                         "utils.py", select="DDP007")
    assert _lines(found) == []


def test_a_set_up_helper_that_leaves_the_rendezvous_to_the_launcher_is_reported(tmp_path: Path) -> None:
    open_helper = SETUP_HELPER.replace('        os.environ["MASTER_ADDR"] = "localhost"\n', "")
    assert open_helper != SETUP_HELPER
    found = lint_project(tmp_path, {"train.py": SETUP_CALLER, "utils.py": open_helper}, "train.py",
                         "utils.py", select="DDP007")
    assert _lines(found) == [11]
