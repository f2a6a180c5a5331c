"""Set-up rules on mechanisms seen on public scripts of batch 28: each through `ddpcheck lint` on a
small project written in the style of the scripts, with a clean (or differently reported) variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A torchrun script (it reads RANK/WORLD_SIZE/LOCAL_RANK) that writes the rendezvous over the
# launcher's in its set-up.
RENDEZVOUS = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist


    def init_distributed(args):
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            args.world_size = int(os.environ["WORLD_SIZE"])
            args.gpu = int(os.environ["LOCAL_RANK"])
        else:
            args.distributed = False
            return
        torch.cuda.set_device(args.gpu)
    {writes}
        dist.init_process_group(backend="nccl", world_size=args.world_size)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--world_size", type=int, default=1)
        init_distributed(parser.parse_args())
"""


def _rendezvous(writes: str) -> dict[str, str]:
    return {"train.py": RENDEZVOUS.replace("    {writes}\n", writes)}


def test_address_and_port_written_together_are_one_finding(tmp_path: Path) -> None:
    writes = ('        os.environ["MASTER_ADDR"] = "127.0.0.1"\n'
              '        os.environ["MASTER_PORT"] = "29500"\n')
    assert lines(tmp_path, _rendezvous(writes), "DDP015") == [("train.py", 15)]


def test_address_and_port_written_apart_are_two_findings(tmp_path: Path) -> None:
    writes = ('        if os.path.exists("/etc/hosts"):\n'
              '            os.environ["MASTER_ADDR"] = "localhost"\n'
              '        print("rendezvous")\n'
              '        os.environ["MASTER_PORT"] = "29500"\n')
    assert lines(tmp_path, _rendezvous(writes), "DDP015") == [("train.py", 16), ("train.py", 18)]


# A loader wrapped in a class defined where the loader is built, whose `__iter__` loops over the
# loader it was given (moving each batch to the device); the epoch loop iterates the wrapper.
WRAPPED = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    def build_data(args, dataset, rank):
        dev = torch.device(f"cuda:{rank}")
        loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False,
                            sampler=DistributedSampler(dataset))

        def to_device(x, y):
            return x.to(dev), y.to(dev)

        class DeviceLoader:
            def __init__(self, dl, func):
                self.dl = dl
                self.func = func

            def __len__(self):
                return len(self.dl)

            def __iter__(self):
                for b in self.dl:
                    yield self.func(*b)

        return DeviceLoader(loader, to_device)


    def train(loader, model, opt, epochs):
        for epoch in range(epochs):
    {set_epoch}
            for x, y in loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()


    def main(args, dataset, model, opt):
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        loader = build_data(args, dataset, rank)
        train(loader, model, opt, args.epochs)


    if __name__ == "__main__":
        main(parse(), make_dataset(), make_model(), make_opt())
"""


def _wrapped(set_epoch: str) -> dict[str, str]:
    return {"train.py": WRAPPED.replace("    {set_epoch}\n", set_epoch)}


def test_loader_iterated_through_a_local_wrapper_class_needs_set_epoch(tmp_path: Path) -> None:
    assert lines(tmp_path, _wrapped(""), "DDP002") == [("train.py", 31)]


def test_set_epoch_through_the_wrapper_attribute_is_clean(tmp_path: Path) -> None:
    files = _wrapped("            loader.dl.sampler.set_epoch(epoch)\n")
    assert lines(tmp_path, files, "DDP002") == []


# The command line parsed at the top level of a config module, the namespace imported by the
# script: the `--local_rank` flag there is the script's only source of the local rank.
OPTIONS = """\
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/base.yaml")
    parser.add_argument("--local_rank", type=int, default=0, help="passed by the launcher")
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
"""

NAMESPACE_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from options import args


    def main():
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(args.local_rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[{device}])
        return model


    if __name__ == "__main__":
        main()
"""


def test_local_rank_flag_of_an_imported_parsed_namespace(tmp_path: Path) -> None:
    files = {"options.py": OPTIONS, "train.py": NAMESPACE_SCRIPT.replace("{device}", "args.local_rank")}
    assert lines(tmp_path, files, "DDP008") == [("options.py", 5)]


def test_imported_namespace_whose_flag_the_script_never_reads_is_clean(tmp_path: Path) -> None:
    script = NAMESPACE_SCRIPT.replace("{device}", "local_rank").replace(
        "        torch.cuda.set_device(args.local_rank)\n",
        "        local_rank = int(os.environ[\"LOCAL_RANK\"])\n        torch.cuda.set_device(local_rank)\n").replace(
        "import torch\n", "import os\n    import torch\n", 1)
    files = {"options.py": OPTIONS, "train.py": script}
    assert lines(tmp_path, files, "DDP008") == []


# A trainer class of another module copies the seed of a YAML configuration into `self.seed`
# and seeds torch with it; the configuration loader falls back to None when the file does not
# parse. The training data draws random crops, so every rank's workers draw the same ones.
CONFIG_UTIL = """\
    import yaml


    def get_config(args):
        with open(args.filename) as file:
            try:
                config = yaml.safe_load(file)
                config = Namespace(**config)
            except yaml.YAMLError as exc:
                config = None
                print(exc)
        return config
"""

TRAINER = """\
    import torch


    class Trainer:
        def __init__(self, config, loader):
            self.seed = config.seed
            self.loader = loader
            self.model = None
            self.build()

        def build(self):
            self.model = torch.nn.Linear(8, 8).cuda()
            torch.manual_seed(self.seed)

        def run(self, epochs):
            for epoch in range(epochs):
                self.loader.sampler.set_epoch(epoch)
                for x in self.loader:
                    self.model(x.cuda()).sum().backward()
"""

SEEDED_SCRIPT = """\
    import argparse
    import os
    import random
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset, DistributedSampler
    from torch.nn.parallel import DistributedDataParallel as DDP
    from trainer import Trainer
    from util import get_config


    class Crops(Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            start = random.randint(0, 8)
            return torch.arange(start, start + 8).float()


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--filename", default="configs/base.yaml")
        config = get_config(parser.parse_args())
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        data = Crops()
        loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data), num_workers=2)
        trainer = Trainer(config, loader)
        trainer.model = DDP(trainer.model)
        trainer.run(10)


    if __name__ == "__main__":
        main()
"""


def test_seed_copied_from_a_yaml_config_into_the_trainer_is_the_same_on_every_rank(tmp_path: Path) -> None:
    files = {"util.py": CONFIG_UTIL, "trainer.py": TRAINER, "train.py": SEEDED_SCRIPT}
    assert lines(tmp_path, files, "DDP029") == [("trainer.py", 13)]


def test_trainer_seed_with_the_rank_added_is_clean(tmp_path: Path) -> None:
    trainer = TRAINER.replace("torch.manual_seed(self.seed)",
                              "torch.manual_seed(self.seed + torch.distributed.get_rank())")
    files = {"util.py": CONFIG_UTIL, "trainer.py": trainer, "train.py": SEEDED_SCRIPT}
    assert lines(tmp_path, files, "DDP029") == []
