"""Set-up rules (DDP003 device, DDP004 learning rate, DDP005 destroy, DDP008 launcher) on
mechanisms seen on public scripts of batch 21: each through `ddpcheck lint` on a small project
written in the style of the scripts, with a variant that must keep (or must not give) the finding."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# One visible GPU shared through gloo, or one GPU per process through nccl: each arm sets its own
# device, so no arm runs without one.
BOTH_ARMS = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        gpus = torch.cuda.device_count()
        if gpus == 1:
            backend = "gloo"
            device = torch.device("cuda:0")
            {single}
        else:
            backend = "nccl"
            device = torch.device(f"cuda:{{local_rank}}")
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
        model = DDP(torch.nn.Linear(4, 4).to(device))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_device_set_on_each_arm_is_not_one_branch_only(tmp_path: Path) -> None:
    files = {"train.py": BOTH_ARMS.format(single="torch.cuda.set_device(0)")}
    assert lines(tmp_path, files, "DDP003") == []


def test_device_set_on_one_arm_only_still_reported(tmp_path: Path) -> None:
    files = {"train.py": BOTH_ARMS.format(single="pass")}
    assert lines(tmp_path, files, "DDP003") == [("train.py", 18)]


# The DDP arm sets the device; the arm for one chosen GPU without a group sets its own before
# moving the model there.
THIRD_ARM = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch import nn


    def train(gpu, opt):
        dist.init_process_group("nccl", init_method=opt.url, world_size=opt.ws, rank=gpu)
        model = nn.Linear(3, 3)
        if opt.dist_type == "multi":
            torch.cuda.set_device(gpu)
            model.cuda(gpu)
            model = nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
        elif gpu is not None:
            {other}
            model = model.cuda(gpu)
        return model


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--dist_type", default="multi")
        opt = parser.parse_args()
        train(0, opt)
        dist.destroy_process_group()
"""


def test_every_arm_that_uses_cuda_sets_its_device(tmp_path: Path) -> None:
    files = {"train.py": THIRD_ARM.format(other="torch.cuda.set_device(gpu)")}
    assert lines(tmp_path, files, "DDP003") == []


def test_arm_without_its_own_setter_still_reported(tmp_path: Path) -> None:
    files = {"train.py": THIRD_ARM.format(other="pass")}
    assert lines(tmp_path, files, "DDP003") == [("train.py", 8)]


# A trainer that tears the group down in a helper method, called only on rank 0 at the end.
RANK0_CLEANUP = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    class Trainer:
        def __init__(self, cfg):
            self.cfg = cfg
            self._init_process()

        def _init_process(self):
            dist.init_process_group(backend="nccl", init_method=self.cfg.url,
                                    world_size=self.cfg.world_size, rank=self.cfg.local_rank)

        def _clean_up(self):
            dist.destroy_process_group()

        def run(self, epochs):
            for epoch in range(epochs):
                pass
            {teardown}


    def main_worker(local_rank, cfg):
        cfg.local_rank = local_rank
        Trainer(cfg).run(cfg.epochs)


    if __name__ == "__main__":
        cfg = object()
        mp.spawn(main_worker, nprocs=2, args=(cfg,))
"""


def test_teardown_helper_called_only_on_rank_zero(tmp_path: Path) -> None:
    files = {"train.py": RANK0_CLEANUP.format(
        teardown="if self.cfg.local_rank in [0, -1]:\n                torch.save({}, 'final.pth')\n                self._clean_up()")}
    assert lines(tmp_path, files, "DDP005") == [("train.py", 12)]


def test_teardown_helper_called_on_every_rank(tmp_path: Path) -> None:
    files = {"train.py": RANK0_CLEANUP.format(
        teardown="if self.cfg.local_rank in [0, -1]:\n                torch.save({}, 'final.pth')\n            self._clean_up()")}
    assert lines(tmp_path, files, "DDP005") == []


# A library with one spawned worker per model; the script runs two of them.
LIB_TRAINER = """\
    import os
    import torch.distributed as dist


    def ddp_setup(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
"""

LIB_RUN = """\
    import torch.multiprocessing as mp
    from torch.distributed import destroy_process_group
    from lib.trainer import ddp_setup


    class Bert:
        def bert_worker(self, rank, world_size, epochs):
            ddp_setup(rank=rank, world_size=world_size)
            for _ in range(epochs):
                pass
            {bert_end}

        def run_bert(self, world_size, epochs):
            mp.spawn(self.bert_worker, args=(world_size, epochs), nprocs=world_size)


    class Gpt:
        def gpt_worker(self, rank, world_size, epochs):
            ddp_setup(rank=rank, world_size=world_size)
            for _ in range(epochs):
                pass
            destroy_process_group()

        def run_gpt(self, world_size, epochs):
            mp.spawn(self.gpt_worker, args=(world_size, epochs), nprocs=world_size)
"""

LIB_SCRIPT = """\
    from lib.run import Bert, Gpt

    if __name__ == "__main__":
        Bert().run_bert(world_size=2, epochs=1)
        Gpt().run_gpt(world_size=2, epochs=1)
"""


def test_spawned_worker_without_teardown_beside_one_with(tmp_path: Path) -> None:
    files = {"lib/__init__.py": "", "lib/trainer.py": LIB_TRAINER,
             "lib/run.py": LIB_RUN.format(bert_end="return None"), "train.py": LIB_SCRIPT}
    assert lines(tmp_path, files, "DDP005") == [("trainer.py", 8)]


def test_every_spawned_worker_tears_down(tmp_path: Path) -> None:
    files = {"lib/__init__.py": "", "lib/trainer.py": LIB_TRAINER,
             "lib/run.py": LIB_RUN.format(bert_end="destroy_process_group()"), "train.py": LIB_SCRIPT}
    assert lines(tmp_path, files, "DDP005") == []


# A singleton options object that parses the command line when it is first built, in `__new__`.
OPTIONS_NEW = """\
    import argparse
    import os


    class Options(object):
        __instance = None

        def __new__(cls, run_parser=True):
            if Options.__instance is None:
                Options.__instance = object.__new__(cls)
                if run_parser:
                    parser = argparse.ArgumentParser()
                    parser.add_argument("-o", "--options", type=str, required=True)
                    parser.add_argument("--local_rank", type=int, default={default})
                    Options.__instance.options = parser.parse_args()
            return Options.__instance
"""

OPTIONS_SCRIPT = """\
    import torch
    import torch.distributed as dist


    def init_distributed_mode(opt):
        torch.cuda.set_device(opt.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")


    if __name__ == "__main__":
        from lavish.options import Options
        opt = Options().options
        init_distributed_mode(opt)
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Linear(2, 2).cuda(opt.local_rank), device_ids=[opt.local_rank])
        dist.destroy_process_group()
"""


def test_local_rank_flag_parsed_in_a_singletons_new(tmp_path: Path) -> None:
    files = {"lavish/__init__.py": "", "lavish/options.py": OPTIONS_NEW.format(default="0"),
             "train.py": OPTIONS_SCRIPT}
    assert lines(tmp_path, files, "DDP008") == [("options.py", 14)]


def test_local_rank_flag_in_new_falling_back_to_the_environment(tmp_path: Path) -> None:
    files = {"lavish/__init__.py": "", "lavish/options.py": OPTIONS_NEW.format(
        default='int(os.environ.get("LOCAL_RANK", 0))'), "train.py": OPTIONS_SCRIPT}
    assert lines(tmp_path, files, "DDP008") == []


# Hugging Face's AdamW given the rate from a parameter's default that the one caller leaves out.
HF_ADAMW = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from transformers import AdamW


    def train_decoder(dataset, args, lr: float = 1e-5, output_dir: str = "."):
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[args.local_rank])
        optimizer = AdamW(model.parameters(), lr=lr)
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset), batch_size=args.bs)
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--bs", type=int, default=64)
        {more}
        args = parser.parse_args()
        train_decoder([], args, {passed}output_dir="out")
"""


def test_library_adamw_with_a_default_rate_nobody_passes(tmp_path: Path) -> None:
    files = {"train.py": HF_ADAMW.format(more="", passed="")}
    assert lines(tmp_path, files, "DDP004") == [("train.py", 9)]


def test_library_adamw_with_the_rate_from_a_flag(tmp_path: Path) -> None:
    files = {"train.py": HF_ADAMW.format(more='parser.add_argument("--lr", type=float, default=1e-5)',
                                         passed="lr=args.lr, ")}
    assert lines(tmp_path, files, "DDP004") == []


# The per-process batch is split over the GPUs of one node, in a script whose world is several
# nodes of them.
PER_NODE = """\
    import os
    from argparse import ArgumentParser
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def train(gpu, args):
        rank = int(os.environ.get("SLURM_NODEID")) * args.ngpus + gpu
        dist.init_process_group(backend="nccl", init_method="env://", world_size=args.world_size, rank=rank)
        torch.cuda.set_device(gpu)
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 4))
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=args.world_size, rank=rank)
        loader = torch.utils.data.DataLoader(dataset, batch_size=int(128 / {divisor}), sampler=sampler)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for (x,) in loader:
                optimizer.zero_grad()
                model(x.cuda(gpu)).sum().backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = ArgumentParser()
        parser.add_argument("--nodes", default=1, type=int)
        parser.add_argument("--ngpus", default=1, type=int)
        parser.add_argument("--epochs", default=2, type=int)
        args = parser.parse_args()
        args.world_size = args.ngpus * args.nodes
        mp.spawn(train, nprocs=args.ngpus, args=(args,))
"""


def test_batch_split_over_one_nodes_gpus_of_several_nodes(tmp_path: Path) -> None:
    files = {"train.py": PER_NODE.format(divisor="args.ngpus")}
    assert lines(tmp_path, files, "DDP004") == [("train.py", 16)]


def test_batch_split_over_the_whole_world(tmp_path: Path) -> None:
    files = {"train.py": PER_NODE.format(divisor="args.world_size")}
    assert lines(tmp_path, files, "DDP004") == []


# A trainer whose base constructor moves the model to `self.local_rank` and wraps it; the
# subclass sets the device only after calling it.
LATE_BASE = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class BaseMethod:
        def __init__(self, config, rank=0, local_rank=0):
            self.config = config
            self.rank = rank
            self.local_rank = local_rank
            self.distributed = config.distributed
            self.backbone = self._distribute_model(torch.nn.Linear(4, 4))

        def _distribute_model(self, model):
            if self.distributed:
                model = model.to(self.local_rank)
                model = DDP(model, device_ids=[self.local_rank])
            return model
"""

LATE_TRAINER = """\
    import torch
    from lab.base import BaseMethod


    class SimTraining(BaseMethod):
        def __init__(self, config, rank=0, local_rank=0):
            {early}
            super().__init__(config, rank, local_rank)
            {late}
            self.head = self._distribute_model(torch.nn.Linear(4, 2))

        def fit(self, loader):
            for x in loader:
                self.head(self.backbone(x)).sum().backward()
"""

LATE_SETUP = """\
    import os
    import torch.distributed as dist


    def setup(rank, world_size, host):
        os.environ["MASTER_ADDR"] = host
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", init_method=f"tcp://{host}:12355", rank=rank, world_size=world_size)


    def cleanup():
        dist.destroy_process_group()
"""

LATE_SCRIPT = """\
    import os
    from lab.setup import setup, cleanup
    from lab.trainer import SimTraining


    def main(rank, local_rank, world_size, config):
        setup(rank, world_size, host="node0")
        trainer = SimTraining(config, rank=rank, local_rank=local_rank)
        trainer.fit([])
        cleanup()


    if __name__ == "__main__":
        config = object()
        main(int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_LOCALID"]),
             int(os.environ["SLURM_NTASKS"]), config)
"""


def _late_files(early: str, late: str) -> dict[str, str]:
    return {"lab/__init__.py": "", "lab/base.py": LATE_BASE, "lab/setup.py": LATE_SETUP,
            "lab/trainer.py": LATE_TRAINER.format(early=early, late=late), "train.py": LATE_SCRIPT}


def test_device_set_in_a_constructor_after_its_base_moved_the_model(tmp_path: Path) -> None:
    files = _late_files("pass", "if self.distributed:\n                torch.cuda.set_device(self.local_rank)")
    assert lines(tmp_path, files, "DDP003") == [("setup.py", 8)]


def test_device_set_in_a_constructor_before_its_base_runs(tmp_path: Path) -> None:
    files = _late_files("if config.distributed:\n                torch.cuda.set_device(local_rank)", "pass")
    assert lines(tmp_path, files, "DDP003") == []


# A repository whose package is installed from a folder of its own (`coig/setup.py` installs
# `coig/coig/`); the training script at `scripts/` imports it by the package's name.
NESTED_DDP_UTILS = """\
    import os
    import torch.distributed as dist


    def ddp_setup(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)


    def cleanup():
        dist.destroy_process_group()
"""

NESTED_SCRIPT = """\
    import torch
    import torch.multiprocessing as mp
    from coig.utils.ddp_utils import ddp_setup, cleanup


    def train(rank, world_size):
        torch.cuda.set_device(rank)
        ddp_setup(rank, world_size)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[rank])
        {end}


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(train, args=(world_size,), nprocs=world_size)
"""


def _nested(end: str) -> dict[str, str]:
    return {".git/HEAD": "ref: refs/heads/main\n", "coig/setup.py": "from setuptools import setup\nsetup(name='coig')\n",
            "coig/coig/__init__.py": "", "coig/coig/utils/__init__.py": "",
            "coig/coig/utils/ddp_utils.py": NESTED_DDP_UTILS, "scripts/train.py": NESTED_SCRIPT.format(end=end)}


def test_helper_of_a_package_installed_from_a_subfolder(tmp_path: Path) -> None:
    assert lines(tmp_path, _nested("pass"), "DDP005", target="scripts/train.py") == [("ddp_utils.py", 8)]


def test_helper_of_a_package_installed_from_a_subfolder_torn_down(tmp_path: Path) -> None:
    assert lines(tmp_path, _nested("cleanup()"), "DDP005", target="scripts/train.py") == []
