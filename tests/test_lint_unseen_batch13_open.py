"""Mechanisms seen on batch 13's a/c/e half (opened for development after its first runs):
each through `ddpcheck lint` on a small project written in the style of the scripts."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers import lint_project

TORCHRUN_OR_SINGLE = """\
    import os

    import torch
    from torch.distributed import destroy_process_group, init_process_group


    def main():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        global_rank = int(os.environ.get("RANK", "0"))
        world_size = int(os.environ.get("WORLD_SIZE", 1))
        is_ddp = world_size > 1
        torch.cuda.set_device(local_rank)
        if is_ddp:
            init_process_group(backend={multi})
        else:
            init_process_group(backend={single})
        train(local_rank)
        if is_ddp:
            destroy_process_group()
"""


def test_a_tcp_rendezvous_on_the_path_without_a_launcher_is_a_one_process_group(tmp_path: Path) -> None:
    text = TORCHRUN_OR_SINGLE.format(
        multi='"nccl"',
        single='"gloo", init_method="tcp://127.0.0.1:29500", world_size=world_size, rank=global_rank')
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP015") == []


def test_a_tcp_rendezvous_on_the_launched_path_is_reported(tmp_path: Path) -> None:
    text = TORCHRUN_OR_SINGLE.format(
        multi='"nccl", init_method="tcp://127.0.0.1:29500", world_size=world_size, rank=global_rank',
        single='"gloo"')
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP015")] == [14]


GLUE_STYLE = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from model import Classifier


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--rank", type=int, default=-1)
        parser.add_argument("--world_size", type=int, default=1)
        parser.add_argument("--master", type=str, default="tcp://127.0.0.1:12345")
        args = parser.parse_args()
        if args.rank == -1:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            dist.init_process_group("gloo", init_method=args.master, world_size=args.world_size, rank=args.rank)
            device = {distributed_device}
        model = Classifier().to(device)
        model = DDP(model)
        train(model, device)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_cuda_only_on_the_path_without_a_process_group_needs_no_set_device(tmp_path: Path) -> None:
    files = {"model.py": "class Classifier:\n    pass\n",
             "train.py": GLUE_STYLE.format(distributed_device='torch.device("cpu")')}
    assert lint_project(tmp_path, files, "train.py", select="DDP003") == []


def test_cuda_on_the_distributed_path_still_needs_set_device(tmp_path: Path) -> None:
    files = {"model.py": "class Classifier:\n    pass\n",
             "train.py": GLUE_STYLE.format(distributed_device='torch.device("cuda")')}
    assert [f["location"]["line"] for f in lint_project(tmp_path, files, "train.py", select="DDP003")] == [18]


TRAINER_THAT_SPAWNS = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, cfg):
            self.cfg = cfg
            self.gpus = cfg["gpus"]

        def run(self):
            if self.cfg["mode"] == "ddp":
                mp.spawn(self._train, nprocs=self.gpus)
            else:
                self._train(0)

        def _train(self, rank):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"
            dist.init_process_group("nccl", rank=rank, world_size=self.gpus)
            torch.cuda.set_device(rank)
            data = torch.utils.data.TensorDataset(torch.randn(64, 8))
            loader = DataLoader(data, sampler=DistributedSampler(data), num_workers=4)
            model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.2)).cuda(rank),
                        device_ids=[rank])
            for (x,) in loader:
                model(x.cuda(rank)).sum().backward()
            dist.destroy_process_group()
"""

STARTS_THE_TRAINER = """\
    import torch
    from trainer import Trainer


    def main(path):
        torch.manual_seed(42)
        Trainer({{"gpus": 2, "mode": "ddp", "path": path}}).run()


    if __name__ == "__main__":
        {call}
"""


def test_a_seed_set_before_a_project_method_that_spawns_stays_in_the_parent(tmp_path: Path) -> None:
    # Spawned workers start a fresh interpreter: the parent's seed never reaches them.
    files = {"trainer.py": TRAINER_THAT_SPAWNS, "run.py": STARTS_THE_TRAINER.format(call='main("cfg.yaml")')}
    assert lint_project(tmp_path, files, "run.py", select="DDP029") == []


def test_the_same_seed_is_reported_when_an_outside_launcher_can_start_the_file(tmp_path: Path) -> None:
    # Read LOCAL_RANK: torchrun may start the file, and then every rank runs the seed.
    call = 'main(os.environ.get("LOCAL_RANK", "cfg.yaml"))'
    files = {"trainer.py": TRAINER_THAT_SPAWNS,
             "run.py": "import os\n" + textwrap.dedent(STARTS_THE_TRAINER).format(call=call)}
    assert [f["location"]["line"] for f in lint_project(tmp_path, files, "run.py", select="DDP029")] == [7]


ONE_BUILDER_FOR_BOTH_SETS = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    def prepare_dataloader(dataset, batch_size, is_train=True):
        if is_train:
            sampler = DistributedSampler(dataset, shuffle=True)
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
        else:
            sampler = DistributedSampler(dataset, shuffle=False)
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


    def main(train_set, eval_set, model, optimizer):
        dist.init_process_group("gloo")
        train_loader = prepare_dataloader(train_set, 32, is_train=True)
        eval_loader = prepare_dataloader(eval_set, 32, is_train=False)
        for epoch in range(10):
            train_loader.sampler.set_epoch(epoch)
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            total = torch.zeros(1)
            with torch.no_grad():
                for x, y in eval_loader:
                    total += torch.nn.functional.l1_loss(model(x), y, reduction="sum")
            dist.all_reduce(total)
            print(total.item() / len(eval_set))
        dist.destroy_process_group()
"""


def test_the_training_branch_of_a_builder_called_for_evaluation_pads_nothing(tmp_path: Path) -> None:
    # The evaluation call passes is_train=False: only the else branch's sampler is its.
    found = lint_project(tmp_path, {"train.py": ONE_BUILDER_FOR_BOTH_SETS}, "train.py", select="DDP018")
    assert [f["location"]["line"] for f in found] == [11]


PHASES = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class AutoEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(16, 4)
            self.decoder = torch.nn.Linear(4, 16)

        def forward(self, x):
            return self.decoder(self.encoder(x))


    def train(loader, train_encoder, train_decoder):
        dist.init_process_group("nccl")
        model = DDP(AutoEncoder().cuda())
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            if train_encoder:
                {encoder_phase}
            if train_decoder:
                recon = model.module.decoder(torch.randn(8, 4).cuda())
                torch.nn.functional.mse_loss(recon, x).backward()
            optimizer.step()
        dist.destroy_process_group()
"""


def test_inner_module_calls_in_one_path_of_a_step_are_one_finding_and_phases_are_each_reported(
        tmp_path: Path) -> None:
    one_path = "z = model.module.encoder(x); recon = model.module.decoder(z); recon.sum().backward()"
    found = lint_project(tmp_path, {"train.py": PHASES.format(encoder_phase=one_path)}, "train.py", select="DDP013")
    assert [f["location"]["line"] for f in found] == [22, 24]
    assert "also runs it through `model.module.decoder(...)`" in found[0]["message"]
