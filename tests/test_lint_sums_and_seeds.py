"""Reduced metrics and seeds as training projects write them, through `ddpcheck lint`: each test
writes a small project and checks the exact findings, with the variant that is (or is not)
reported."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write


def _lint(tmp_path, files: dict[str, str], target: str, select: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, files)
    return _findings(tmp_path, target, select=select)


# --- DDP022: one finding per tensor and function; unused variants; histograms ------------------

EVALUATE = """\
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F


    def validate(loader, model, criterion, flip):
        model.eval()
        total_loss = 0.0
        for image, target in loader:
            with torch.no_grad():
                output = model(image)
                loss = criterion(output, target).detach()
                dist.all_reduce(loss, dist.ReduceOp.SUM)
                total_loss += loss
                if flip:
                    output = model(torch.flip(image, dims=(3,)))
                    loss = criterion(output, target).detach()
                    dist.all_reduce(loss, dist.ReduceOp.SUM)
                    total_loss += loss
        return total_loss / len(loader)


    def validate_cpu(loader, model, criterion):
        total_loss = 0.0
        for image, target in loader:
            loss = criterion(model(image), target).detach()
            dist.all_reduce(loss, dist.ReduceOp.SUM)
            total_loss += loss
        return total_loss / len(loader)


    def main():
        dist.init_process_group("nccl")
        model, loader, criterion = build()
        print(validate(loader, model, criterion, flip=True))
    {call}

    if __name__ == "__main__":
        main()
    """


def test_a_loss_reduced_twice_in_one_function_is_one_finding_and_an_unused_variant_none(tmp_path):
    assert _lint(tmp_path, {"train.py": EVALUATE.format(call="")}, "train.py", "DDP022") == {
        ("train.py", 13, "DDP022")}


def test_the_variant_reported_once_it_is_called(tmp_path):
    text = EVALUATE.format(call="    print(validate_cpu(loader, model, criterion))\n")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP022") == {
        ("train.py", 13, "DDP022"), ("train.py", 27, "DDP022")}


CONFUSION = """\
    import numpy as np
    import torch
    import torch.distributed as dist


    def fast_hist(pred, gt, n):
        keep = (gt >= 0) & (gt < n)
        return np.bincount(n * gt[keep].astype(int) + pred[keep], minlength=n ** 2).reshape(n, n)


    def validate(loader, net, classes):
        iou_acc = 0
        for images, labels in loader:
            preds = net(images).argmax(1)
            iou_acc += {count}
        iou_acc_tensor = torch.cuda.FloatTensor(iou_acc)
        dist.all_reduce(iou_acc_tensor, op=dist.ReduceOp.SUM)
        iou_acc = iou_acc_tensor.cpu().numpy()
        return np.diag(iou_acc) / (iou_acc.sum(0) + iou_acc.sum(1) - np.diag(iou_acc))


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        print(validate(*build()))
    """


def test_a_tensor_made_from_accumulated_histograms_is_a_count(tmp_path):
    text = CONFUSION.format(count="fast_hist(preds.numpy().flatten(), labels.numpy().flatten(), classes)")
    assert _lint(tmp_path, {"val.py": text}, "val.py", "DDP022") == set()


def test_a_tensor_made_from_accumulated_scores_is_reported(tmp_path):
    text = CONFUSION.format(count="(preds == labels).float().mean().item()")
    assert _lint(tmp_path, {"val.py": text}, "val.py", "DDP022") == {("val.py", 17, "DDP022")}


# --- DDP029: seeds set in project helpers and configurations -----------------------------------

SEEDED_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms

    {imports}


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        {seed}
        augment = transforms.RandomResizedCrop(224)
        train_set = build_set(augment)
        loader = DataLoader(train_set, sampler=DistributedSampler(train_set), batch_size=32, num_workers=4)
        model = DDP(build_model().cuda(rank), device_ids=[rank])
        for x, y in loader:
            model(x).sum().backward()


    if __name__ == "__main__":
        main()
    """


def _seeded(tmp_path, imports: str, seed: str, helpers: dict[str, str]) -> set[tuple[str, int, str]]:
    text = SEEDED_SCRIPT.format(imports=imports.replace("\n", "\n    "), seed=seed)
    files = {"train.py": text, **helpers}
    return _lint(tmp_path, files, "train.py", "DDP029")


SEED_DEFAULT = """\
    import random

    import numpy as np
    import torch


    def seed_everything(seed={default}):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)
    """


def test_a_seeding_helper_called_with_nothing_seeds_with_its_default(tmp_path):
    helpers = {"tools/seeding.py": SEED_DEFAULT.format(default="1029"), "tools/__init__.py": ""}
    assert _seeded(tmp_path, "from tools.seeding import seed_everything", "seed_everything()", helpers) == {
        ("train.py", 13, "DDP029")}
    # Given the rank, or with no literal default to fall back on: nothing to say.
    assert _seeded(tmp_path, "from tools.seeding import seed_everything", "seed_everything(1029 + rank)",
                   helpers) == set()
    helpers = {"tools/seeding.py": SEED_DEFAULT.format(default="None"), "tools/__init__.py": ""}
    assert _seeded(tmp_path, "from tools.seeding import seed_everything", "seed_everything()", helpers) == set()


ENV_SETUP = """\
    import torch


    def setup_training_env(benchmark):
        torch.backends.cudnn.benchmark = benchmark
        {seed}
        print("cuda:", torch.cuda.is_available())
        return torch.cuda.device_count()
    """


def test_a_project_function_that_seeds_with_a_literal_is_reported_where_the_script_calls_it(tmp_path):
    helpers = {"envsetup.py": ENV_SETUP.format(seed="torch.manual_seed(54321)")}
    assert _seeded(tmp_path, "from envsetup import setup_training_env", "setup_training_env(True)", helpers) == {
        ("train.py", 13, "DDP029")}
    # Seeding only when asked, or nothing seeded at all: clean.
    helpers = {"envsetup.py": ENV_SETUP.format(seed="if benchmark:\n            torch.manual_seed(54321)")}
    assert _seeded(tmp_path, "from envsetup import setup_training_env", "setup_training_env(True)", helpers) == set()
    helpers = {"envsetup.py": ENV_SETUP.format(seed="pass")}
    assert _seeded(tmp_path, "from envsetup import setup_training_env", "setup_training_env(True)", helpers) == set()
    # A builder that seeds before it draws the initial weights fixes what it builds.
    builder = ENV_SETUP.format(seed="torch.manual_seed(0)").replace("setup_training_env", "create_model")
    helpers = {"envsetup.py": builder}
    assert _seeded(tmp_path, "from envsetup import create_model", "create_model(True)", helpers) == set()


def test_a_training_function_of_another_module_reports_its_own_seed(tmp_path):
    trainer = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP


        def train(args):
            torch.manual_seed(12345)
            model = DDP(build_model(args).cuda(), device_ids=[dist.get_rank()])
            for batch in batches(args):
                model(batch).sum().backward()
        """
    script = """\
        import torch.distributed as dist
        from trainer import train

        if __name__ == "__main__":
            dist.init_process_group("nccl")
            train(parse())
        """
    # Once, where it is written (the script's call would be the same finding again).
    _write(tmp_path, {"run.py": script, "trainer.py": trainer})
    found = _findings(tmp_path, "run.py", "trainer.py", select="DDP029")
    assert ("run.py", 6, "DDP029") not in found


YACS_DEFAULTS = """\
    from yacs.config import CfgNode as CN

    _C = CN()
    _C.OUTPUT_DIR = ""
    _C.SEED = 233
    _C.TRAIN = CN()
    _C.TRAIN.LR = 0.1


    def update_config(cfg, args):
        cfg.defrost()
        cfg.merge_from_file(args.config)
        {extra}
        cfg.freeze()
    """
CONFIG_INIT = "from .defaults import _C as config, update_config\n"
SET_SEED = """\
    import random

    import numpy as np
    import torch


    def set_seed(config, rank=-1):
        seed = {seed}
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)
    """


def test_a_yacs_configuration_of_the_project_is_alike_on_every_rank(tmp_path):
    def helpers(extra: str = "", seed: str = "config.SEED") -> dict[str, str]:
        return {"settings/defaults.py": YACS_DEFAULTS.format(extra=extra), "settings/__init__.py": CONFIG_INIT,
                "misc.py": SET_SEED.format(seed=seed)}

    imports = "from settings import config\nfrom misc import set_seed"
    assert _seeded(tmp_path, imports, "set_seed(config, rank)", helpers()) == {("train.py", 14, "DDP029")}
    # The helper adds the rank it is given, or the loader sets the seed per rank: clean.
    assert _seeded(tmp_path, imports, "set_seed(config, rank)", helpers(seed="config.SEED + rank")) == set()
    extra = 'cfg.SEED = cfg.SEED + int(os.environ["RANK"])'
    assert _seeded(tmp_path, imports, "set_seed(config, rank)", helpers(extra=extra)) == set()


def test_an_attribute_dict_built_at_import_is_a_configuration(tmp_path):
    settings = """\
        from attrdict_util import AttrDict

        __C = AttrDict()
        cfg = __C
        __C.RANDOM_SEED = 304
        __C.EPOCH = 0
        """
    imports = "from settings import cfg"
    helpers = {"settings.py": settings, "attrdict_util.py": "class AttrDict(dict):\n    pass\n"}
    assert _seeded(tmp_path, imports, "torch.manual_seed(cfg.RANDOM_SEED)", helpers) == {("train.py", 13, "DDP029")}
    # Any other object of the project: unknown.
    helpers["settings.py"] = settings.replace("AttrDict()", "load_settings()")
    assert _seeded(tmp_path, imports, "torch.manual_seed(cfg.RANDOM_SEED)", helpers) == set()


def test_a_parameter_declared_a_namespace_is_the_command_line(tmp_path):
    script = """\
        import argparse

        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler

        from tools import launch, seed_all


        def main_worker(gpu: int, ngpus: int, args: argparse.Namespace):
            seed_all(args.seed)
            args.rank = args.rank * ngpus + gpu
            dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
            loader = DataLoader(args.data, sampler=DistributedSampler(args.data), num_workers=4)
            masks = torch.rand(8) > 0.5


        def main(args: argparse.Namespace):
            launch(args, main_worker)
        """
    tools = """\
        import torch


        def seed_all(seed: int = 0):
            torch.manual_seed(seed)
            torch.cuda.manual_seed_all(seed)


        def launch(args, worker):
            torch.multiprocessing.spawn(worker, nprocs=args.ngpus, args=(args.ngpus, args))
        """
    _write(tmp_path, {"train.py": script, "tools.py": tools})
    assert _findings(tmp_path, "train.py", select="DDP029") == {("train.py", 11, "DDP029")}
    _write(tmp_path, {"train.py": script.replace("seed_all(args.seed)", "seed_all(args.seed + gpu)")})
    assert _findings(tmp_path, "train.py", select="DDP029") == set()


GPU_SEED = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.utils.data import DataLoader, DistributedSampler


    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Dropout({p}), nn.Conv2d(8, 1, 3))

        def forward(self, x):
            return self.body(x)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("nccl", init_method="env://")
        torch.cuda.set_device(args.local_rank)
        {seed}
        loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=8)
        model = torch.nn.parallel.DistributedDataParallel(UNet().cuda(), device_ids=[args.local_rank])


    if __name__ == "__main__":
        main()
    """


def test_only_the_gpu_generator_seeded_alike_is_reported_where_the_model_drops_out(tmp_path):
    text = GPU_SEED.format(p="0.5", seed="torch.cuda.manual_seed(args.seed)")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP029") == {("train.py", 25, "DDP029")}
    # No dropout (the workers' seeds come from torch's own generator, left alone), or torch's own
    # generator seeded per rank first: clean.
    for p, seed in (("0.0", "torch.cuda.manual_seed(args.seed)"),
                    ("0.5", "torch.manual_seed(args.seed + dist.get_rank()); torch.cuda.manual_seed(args.seed + dist.get_rank())")):
        text = GPU_SEED.format(p=p, seed=seed)
        if p == "0.0":
            text = text.replace("nn.Dropout(0.0), ", "")
        assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP029") == set(), seed


def test_a_pretrained_library_network_trains_with_dropout(tmp_path):
    script = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from transformers import {cls}


        def main(args):
            dist.init_process_group("nccl")
            torch.manual_seed(args.train_seed)
            net = {cls}.from_pretrained("gpt2")
            model = DDP(net.cuda(), device_ids=[args.local_rank]) if {wrap} else None
            for batch in load_batches(args.data):
                model(**batch).loss.backward()


        if __name__ == "__main__":
            parser = build_parser()
            parser.add_argument("--train_seed", type=int, default=1)
            main(parser.parse_args())
        """
    text = script.format(cls="AutoModelForCausalLM", wrap="True")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP029") == {("train.py", 9, "DDP029")}
    # A tokenizer loads no network: nothing in the job drops out.
    text = script.format(cls="AutoTokenizer", wrap="True")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP029") == set()
    # Built from a configuration, with no sharding in sight: its configuration may set no dropout.
    text = script.format(cls="AutoModelForCausalLM", wrap="True").replace(
        'AutoModelForCausalLM.from_pretrained("gpt2")', "AutoModelForCausalLM.from_config(args.config)")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP029") == set()


def test_a_tokenizer_loaded_for_a_sharded_loader_is_no_draw(tmp_path):
    # A job whose only `from_pretrained` is a tokenizer's (in the project's data module) draws
    # nothing while it trains: the same seed on every rank changes nothing. A network loaded the
    # same way trains with its dropout and is reported.
    data = """\
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        from transformers import {cls}


        class TextData:
            def __init__(self, path, batch_size):
                self.tokenizer = {cls}.from_pretrained("bert-base-uncased")
                self.rows = open(path).read().split("\\n")
                self.batch_size = batch_size

            def train_loader(self):
                return DataLoader(self.rows, batch_size=self.batch_size, sampler=DistributedSampler(self.rows))
        """
    script = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        from data import TextData


        def main():
            torch.manual_seed(1234)
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(768, 2).cuda())
            for batch in TextData("train.txt", 32).train_loader():
                model(batch).sum().backward()


        if __name__ == "__main__":
            main()
        """
    for cls in ("AutoTokenizer", "BertTokenizerFast", "LlamaTokenizer"):
        files = {"train.py": script, "data.py": data.format(cls=cls)}
        assert _lint(tmp_path, files, "train.py", "DDP029") == set(), cls
    files = {"train.py": script, "data.py": data.format(cls="AutoModel")}
    assert _lint(tmp_path, files, "train.py", "DDP029") == {("train.py", 9, "DDP029")}
    # A library network built from a configuration read with `from_pretrained` trains with the
    # dropout that configuration sets.
    text = script.replace("torch.nn.Linear(768, 2)",
                          'AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("gpt2"))')
    text = text.replace("from data import TextData", "from data import TextData\n"
                        "        from transformers import AutoConfig, AutoModelForCausalLM")
    files = {"train.py": text, "data.py": data.format(cls="AutoTokenizer")}
    assert _lint(tmp_path, files, "train.py", "DDP029") == {("train.py", 10, "DDP029")}


# --- DDP008: what a set-up helper writes into the flag's entry -----------------------------------

LAUNCH_SCRIPT = """\
    import argparse

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from cluster import init_distributed_mode
    from network import Wrapper


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        parser.add_argument("--lr", type=float, default=1e-4)
        params = parser.parse_args()
        init_distributed_mode(params)
        model = Wrapper(params.local_rank).module
        model = DDP(model.cuda(), device_ids=[params.local_rank])


    if __name__ == "__main__":
        main()
    """
CLUSTER = """\
    import os

    import torch


    def init_distributed_mode(params):
        params.is_slurm_job = "SLURM_JOB_ID" in os.environ
        if params.is_slurm_job:
            params.global_rank = int(os.environ["SLURM_PROCID"])
            params.local_rank = int(os.environ["SLURM_LOCALID"])
            params.world_size = int(os.environ["SLURM_NTASKS"])
        elif params.local_rank != -1:
            params.global_rank = int(os.environ["RANK"])
            params.world_size = int(os.environ["WORLD_SIZE"])
        else:
            params.local_rank = {single}
            params.global_rank = 0
            params.world_size = 1
        if params.world_size > 1:
            torch.cuda.set_device(params.local_rank)
            torch.distributed.init_process_group("nccl", init_method="env://")
    """
NETWORK = """\
    import torch.nn as nn


    class Wrapper:
        def __init__(self, local_rank=-1):
            self.local_rank = local_rank
            self.module = nn.Linear(4, 4)
    """


def test_the_flag_stays_the_launcher_path_source_when_helpers_write_only_slurm_and_constants(tmp_path):
    files = {"train.py": LAUNCH_SCRIPT, "cluster.py": CLUSTER.format(single="0"), "network.py": NETWORK}
    # (an object keeping the parameter as `self.local_rank` is no write of the namespace's entry)
    assert _lint(tmp_path, files, "train.py", "DDP008") == {("train.py", 12, "DDP008")}


def test_a_helper_that_derives_the_local_rank_on_every_path_replaces_the_flag(tmp_path):
    cluster = CLUSTER.format(single="0").replace(
        '            params.world_size = int(os.environ["WORLD_SIZE"])\n',
        '            params.world_size = int(os.environ["WORLD_SIZE"])\n'
        '            params.local_rank = params.global_rank % torch.cuda.device_count()\n')
    files = {"train.py": LAUNCH_SCRIPT, "cluster.py": cluster, "network.py": NETWORK}
    assert _lint(tmp_path, files, "train.py", "DDP008") == set()


def test_the_dict_of_the_parsed_namespace_is_the_command_line(tmp_path):
    script = """\
        import argparse
        import random

        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        from torch.utils.data import DataLoader, DistributedSampler


        def init_seeds(seed=0):
            random.seed(seed)
            torch.manual_seed(seed)


        def main(rank, nprocs, args):
            dist.init_process_group("nccl", rank=rank, world_size=nprocs)
            init_seeds({seed})
            loader = DataLoader(args["data"], sampler=DistributedSampler(args["data"]), num_workers=4)
            noise = torch.randn(4)


        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("--seed", type=int, default=3)
            args = parser.parse_args()
            args = vars(args)
            mp.spawn(main, nprocs=args["nprocs"], args=(args["nprocs"], args))
        """
    assert _lint(tmp_path, {"train.py": script.format(seed='args["seed"]')}, "train.py", "DDP029") == {
        ("train.py", 17, "DDP029")}
    assert _lint(tmp_path, {"train.py": script.format(seed='args["seed"] + rank')}, "train.py", "DDP029") == set()


# --- DDP003/DDP005: a module the project installs as a command is a script ----------------------

CLI = """\
    import fire
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from painter.trainer import Trainer


    def run_training(rank, world_size, steps):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        trainer = Trainer(rank=rank)
        trainer.model.cuda(rank)
        for _ in range(steps):
            trainer.train()
        dist.destroy_process_group()


    def train_from_folder(steps=1000):
        world_size = torch.cuda.device_count()
        mp.spawn(run_training, args=(world_size, steps), nprocs=world_size, join=True)


    def main():
        fire.Fire(train_from_folder)
    """
SETUP = """\
    from setuptools import find_packages, setup

    setup(
        name="painter",
        packages=find_packages(),
        entry_points={{
            "console_scripts": [
                "{entry}",
            ],
        }},
    )
    """


def test_a_console_script_named_by_the_packaging_is_a_script(tmp_path):
    files = {"painter/__init__.py": "", "painter/trainer.py": "class Trainer:\n    pass\n",
             "painter/cli.py": CLI, "setup.py": SETUP.format(entry="painter = painter.cli:main")}
    assert _lint(tmp_path, files, "painter/cli.py", "DDP003") == {("cli.py", 10, "DDP003")}
    # pyproject's [project.scripts] says the same.
    (tmp_path / "setup.py").unlink()
    _write(tmp_path, {"pyproject.toml": '[project]\nname = "painter"\n\n[project.scripts]\npainter = "painter.cli:main"\n'})
    assert _findings(tmp_path, "painter/cli.py", select="DDP003") == {("cli.py", 10, "DDP003")}


def test_a_module_the_packaging_does_not_name_stays_a_library(tmp_path):
    files = {"painter/__init__.py": "", "painter/trainer.py": "class Trainer:\n    pass\n",
             "painter/cli.py": CLI, "setup.py": SETUP.format(entry="painter = painter.other:main")}
    assert _lint(tmp_path, files, "painter/cli.py", "DDP003") == set()


def test_a_project_network_that_copies_library_weights_does_not_drop_out(tmp_path):
    script = """\
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP


        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(768, 50257, bias=False)

            @classmethod
            def from_pretrained(cls, name):
                from transformers import GPT2LMHeadModel
                model, hf = cls(), GPT2LMHeadModel.from_pretrained(name)
                model.head.weight.data.copy_(hf.lm_head.weight.data)
                return model


        if __name__ == "__main__":
            dist.init_process_group("nccl")
            torch.manual_seed(42)
            model = DDP(GPT.from_pretrained("gpt2").cuda(), device_ids=[dist.get_rank()])
            for batch in batches():
                model(batch).sum().backward()
        """
    assert _lint(tmp_path, {"train.py": script}, "train.py", "DDP029") == set()


# A training epoch that reduces the loss sum beside the accuracy counts but only ever reads the
# counts afterwards: the summed loss misleads no one.
EPOCH_COUNTS = """\
    import torch
    import torch.distributed as dist


    def train(model, loader, optimizer, criterion, epochs, device):
        history = []
        for epoch in range(epochs):
            train_loss = torch.zeros(1, device=device)
            correct = torch.zeros(1, device=device)
            total = torch.zeros(1, device=device)
            for inputs, targets in loader:
                outputs = model(inputs.to(device))
                loss = criterion(outputs, targets.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                train_loss += loss.item()
                correct += (outputs.argmax(1) == targets.to(device)).sum()
                total += targets.size(0)
            dist.all_reduce(train_loss, op=dist.ReduceOp.SUM)
            dist.all_reduce(correct, op=dist.ReduceOp.SUM)
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            history.append((100.0 * correct / total).item())
        return history
"""


def test_a_reduced_loss_nobody_reads_afterwards_is_not_reported(tmp_path):
    assert _lint(tmp_path, {"train.py": EPOCH_COUNTS}, "train.py", "DDP022") == set()


def test_a_reduced_loss_read_afterwards_is_reported(tmp_path):
    read = EPOCH_COUNTS.replace("            history.append((100.0 * correct / total).item())\n",
                                "            history.append((100.0 * correct / total).item())\n"
                                "            print(f\"epoch {epoch} loss {train_loss.item():.3f}\")\n")
    assert read != EPOCH_COUNTS
    assert _lint(tmp_path, {"train.py": read}, "train.py", "DDP022") == {("train.py", 20, "DDP022")}


# --- DDP022: sums and their count reduced in one tensor, read back by unpacking ------------------

UNPACKED = """\
import torch
import torch.distributed as dist


def train(model, loader, optimizer, epochs, device):
    for epoch in range(epochs):
        running_loss, running_acc, steps = 0.0, 0.0, 0
        for x, y in loader:
            out = model(x.to(device))
            loss = torch.nn.functional.cross_entropy(out, y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            running_acc += (out.argmax(1) == y.to(device)).float().mean().item()
            steps += 1
        epoch_loss = torch.tensor([running_loss, running_acc, steps], device=device)
        dist.all_reduce(epoch_loss)
        loss_sum, acc_sum, all_steps = epoch_loss.tolist()
{read}


if __name__ == "__main__":
    dist.init_process_group("nccl")
    train(*build())
"""


def test_sums_unpacked_from_the_reduced_tensor_and_divided_by_its_count_are_means(tmp_path):
    # The count travels in the same tensor: each sum divided by the reduced count is a mean.
    read = "        print(loss_sum / max(all_steps, 1), acc_sum / max(all_steps, 1))"
    assert _lint(tmp_path, {"train.py": UNPACKED.format(read=read)}, "train.py", "DDP022") == set()


def test_values_unpacked_from_the_reduced_tensor_but_not_divided_are_still_reported(tmp_path):
    # Read back, but nothing divides by the count (nor by the world size): N times the mean.
    read = "        print(loss_sum, acc_sum, all_steps)"
    assert _lint(tmp_path, {"train.py": UNPACKED.format(read=read)}, "train.py", "DDP022") == {("train.py", 18, "DDP022")}
