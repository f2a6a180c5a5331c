"""Loaders, samplers and rank branches written the ways projects write them, through `ddpcheck
lint`: a loader restarted by a generator helper, a test loader built and never read, a project
module imported over a same-named one from a library, and several collectives in one rank-0
branch."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

# --- DDP002: a helper generator that starts the loader over when it runs out -------------------

CYCLE_HELPERS = {
    "plain": """\
        def endless(iterable):
            it = iter(iterable)
            while True:
                try:
                    yield next(it)
                except StopIteration:
                    it = iter(iterable)
        """,
    "dunder": """\
        def endless(iterable):
            iterator = iterable.__iter__()
            while True:
                try:
                    yield iterator.__next__()
                except StopIteration:
                    iterator = iterable.__iter__()
        """,
    "nested_for": """\
        def endless(loader):
            while True:
                for batch in loader:
                    yield batch
        """,
}

CYCLE_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from utils.misc import endless


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dataset = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    batches = endless(loader)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
    for step in range(10000):
        x, y = next(batches)
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _ddp002(tmp_path: Path, helper: str, script: str = CYCLE_SCRIPT) -> list[tuple[str, int, str]]:
    found = lint_project(tmp_path, {"train.py": script, "utils/__init__.py": "", "utils/misc.py": helper},
                         "train.py", select="DDP002")
    return [(f["code"], f["location"]["line"], f["message"]) for f in found]


def test_a_generator_that_restarts_the_loader_is_reported_where_it_is_handed_the_loader(tmp_path):
    for kind in ("plain", "dunder"):
        found = _ddp002(tmp_path / kind, CYCLE_HELPERS[kind])
        assert [(c, line) for c, line, _ in found] == [("DDP002", 15)], kind
        assert "`endless()` starts the loader over" in found[0][2]
    # A `for` over the loader inside the helper's own loop: that loop is the epoch loop.
    found = _ddp002(tmp_path / "nested_for", CYCLE_HELPERS["nested_for"])
    assert [(c, line) for c, line, _ in found] == [("DDP002", 2)]


def test_a_restarting_generator_stays_clean_when_it_sets_the_epoch_or_the_sampler_does_not_shuffle(tmp_path):
    counted = """\
        def endless(loader):
            epoch = 0
            while True:
                loader.sampler.set_epoch(epoch)
                for batch in loader:
                    yield batch
                epoch += 1
        """
    assert _ddp002(tmp_path / "counted", counted) == []
    no_shuffle = CYCLE_SCRIPT.replace("DistributedSampler(dataset, shuffle=True)",
                                      "DistributedSampler(dataset, shuffle=False)")
    assert _ddp002(tmp_path / "ordered", CYCLE_HELPERS["plain"], no_shuffle) == []


def test_a_helper_that_reads_the_loader_once_is_no_restart(tmp_path):
    # Iterates its argument once (no loop around the pass): nothing starts the loader over.
    once = """\
        def first_batches(loader, n):
            out = []
            for batch in loader:
                out.append(batch)
                if len(out) == n:
                    break
            return out
        """
    script = CYCLE_SCRIPT.replace("batches = endless(loader)", "batches = iter(first_batches(loader, 4))") \
        .replace("from utils.misc import endless", "from utils.misc import first_batches")
    assert _ddp002(tmp_path, once, script) == []


# --- DDP018: an evaluation sampler whose loader nothing reads ---------------------------------

EVAL_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def validate(model, loader, device):
    total = torch.zeros(2, device=device)
    with torch.no_grad():
        for x, y in loader:
            out = model(x.to(device))
            total[0] += (out.argmax(1) == y.to(device)).sum()
            total[1] += len(y)
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def main(train_set, val_set, test_set, model):
    dist.init_process_group("nccl")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    train_sampler = DistributedSampler(train_set, shuffle=True)
    val_sampler = DistributedSampler(val_set, shuffle=False)
    test_sampler = DistributedSampler(test_set, shuffle=False)
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=64, sampler=val_sampler)
    test_loader = DataLoader(test_set, batch_size=64, sampler=test_sampler)
    for epoch in range(10):
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            pass
        print(validate(model, val_loader, device))
{tail}
"""


def _ddp018(tmp_path: Path, tail: str = "") -> list[int]:
    found = lint_project(tmp_path, {"train.py": EVAL_SCRIPT.replace("{tail}", tail)}, "train.py", select="DDP018")
    return sorted(f["location"]["line"] for f in found)


def test_a_test_sampler_whose_loader_is_never_read_is_not_reported(tmp_path):
    # Only the validation sampler feeds an evaluation the metric is all-reduced over.
    assert _ddp018(tmp_path) == [23]


def test_the_test_sampler_is_reported_once_its_loader_is_used(tmp_path):
    assert _ddp018(tmp_path / "evaluated", "    print(validate(model, test_loader, device))") == [23, 24]
    assert _ddp018(tmp_path / "returned", "    return test_loader") == [23, 24]
    # Handed on through a dict, or read through locals(): a use the check cannot rule out.
    assert _ddp018(tmp_path / "dict", "    loaders = {'test': test_loader}\n    run(loaders)") == [23, 24]
    assert _ddp018(tmp_path / "locals", "    run(**locals())") == [23, 24]


def test_a_sampler_read_besides_its_loader_is_reported(tmp_path):
    assert _ddp018(tmp_path, "    print(len(test_sampler))") == [23, 24]


# --- DDP001: `import datasets` after `from torchvision import datasets` --------------------------

SHADOW_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torchvision import datasets, models
import datasets
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(models.resnet18().cuda(), device_ids=[local_rank])
    loaders = {split: datasets.get_loader(split) for split in ("train", "val")}
    for epoch in range(10):
        for x, y in loaders["train"]:
            model(x.cuda()).sum().backward()


if __name__ == "__main__":
    main()
"""

SHADOW_DATASETS = """\
import torch
from torch.utils import data


def get_loader(mode="train"):
    dataset = data.TensorDataset(torch.randn(64, 3, 32, 32), torch.zeros(64))
    sampler = data.RandomSampler(dataset) if mode == "train" else data.SequentialSampler(dataset)
    return data.DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=False)
"""


def test_a_project_module_imported_after_a_library_one_of_the_same_name_is_the_projects(tmp_path):
    found = lint_project(tmp_path, {"train.py": SHADOW_SCRIPT, "datasets.py": SHADOW_DATASETS},
                         "train.py", "datasets.py", select="DDP001")
    assert [(Path(f["path"]).name, f["location"]["line"]) for f in found] == [("datasets.py", 8)]


def test_a_library_module_imported_after_the_project_one_stays_the_librarys(tmp_path):
    # The later import binds the name: the calls go to torchvision, which the lint does not read.
    script = SHADOW_SCRIPT.replace("from torchvision import datasets, models\nimport datasets\n",
                                   "import datasets\nfrom torchvision import datasets, models\n")
    found = lint_project(tmp_path, {"train.py": script, "datasets.py": SHADOW_DATASETS},
                         "train.py", "datasets.py", select="DDP001")
    assert found == []


# --- DDP009: several collectives in one rank-0 branch ------------------------------------------

BRANCH_SCRIPT = """\
import os
import torch
import torch.distributed as dist


def reduce_mean(t):
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    train_loss = torch.ones(1).cuda()
    val_loss = torch.ones(1).cuda()
    if dist.get_rank() == 0:
        print(reduce_mean(train_loss))
        print(reduce_mean(val_loss))
        dist.barrier()
{tail}


if __name__ == "__main__":
    main()
"""


def _ddp009(tmp_path: Path, tail: str = "") -> list[int]:
    found = lint_project(tmp_path, {"train.py": BRANCH_SCRIPT.replace("{tail}", tail)}, "train.py", select="DDP009")
    return sorted(f["location"]["line"] for f in found)


def test_a_helper_called_again_in_the_next_statement_is_reported_once_at_the_first(tmp_path):
    # reduce_mean() twice in a row is one finding; the barrier is other work and has its own.
    assert _ddp009(tmp_path) == [18, 20]


def test_each_rank_branch_is_reported_on_its_own(tmp_path):
    tail = "    if dist.get_rank() == 0:\n        dist.barrier()"
    assert _ddp009(tmp_path, tail) == [18, 20, 22]


# --- DDP008: a config module whose parser a `get_args()` of its own parses --------------------

CONFIG_MODULE = """\
import argparse

parser = argparse.ArgumentParser()


def add_group(name):
    return parser.add_argument_group(name)


train_arg = add_group("Train")
train_arg.add_argument("--lr", type=float, default=1e-3)
misc_arg = add_group("Misc")
misc_arg.add_argument("--local_rank", type=int, default=-1)


def get_args():
    args, unparsed = parser.parse_known_args()
    return args, unparsed
"""

CONFIG_SCRIPT = """\
import os
import torch
import torch.distributed as dist
import config.options as options

args, _ = options.get_args()
{rank}
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
"""


def _ddp008(tmp_path: Path, rank: str, config: str = CONFIG_MODULE) -> list[tuple[str, int]]:
    found = lint_project(tmp_path, {"train.py": CONFIG_SCRIPT.replace("{rank}", rank), "config/__init__.py": "",
                                    "config/options.py": config}, "train.py", select="DDP008")
    return [(Path(f["path"]).name, f["location"]["line"]) for f in found]


def test_a_local_rank_flag_of_a_config_module_parsed_by_its_get_args_is_reported_there(tmp_path):
    assert _ddp008(tmp_path, "local_rank = args.local_rank") == [("options.py", 13)]


def test_the_config_modules_flag_stays_clean_when_the_script_reads_local_rank(tmp_path):
    rank = 'local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank))'
    assert _ddp008(tmp_path, rank) == []
    # A get_args() that builds and parses its own parser does not parse the module's flags.
    own = CONFIG_MODULE.replace("    args, unparsed = parser.parse_known_args()",
                                "    parser = argparse.ArgumentParser()\n"
                                "    args, unparsed = parser.parse_known_args()")
    assert _ddp008(tmp_path / "own", "local_rank = 0", own) == []


# --- DDP015: rendezvous literals in a set-up helper of another module ---------------------------

SETUP_MODULE = """\
import os
import torch.distributed as dist


def setup_ddp(rank, world_size):
{body}
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
"""

LAUNCHED_SCRIPT = """\
import os
import torch
from trainer import setup_ddp

if __name__ == "__main__":
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    setup_ddp(rank, world_size)
"""


def _ddp015(tmp_path: Path, body: str) -> list[tuple[str, int]]:
    found = lint_project(tmp_path, {"main.py": LAUNCHED_SCRIPT, "trainer.py": SETUP_MODULE.replace("{body}", body)},
                         "main.py", select="DDP015")
    return [(Path(f["path"]).name, f["location"]["line"]) for f in found]


def test_literal_rendezvous_writes_in_a_helper_a_torchrun_script_runs_are_reported_once(tmp_path):
    body = '    os.environ["MASTER_ADDR"] = "localhost"\n    os.environ["MASTER_PORT"] = "12355"'
    assert _ddp015(tmp_path, body) == [("trainer.py", 6)]


def test_a_helpers_write_on_the_launchers_own_path_is_reported(tmp_path):
    # The body of a test that the launcher's variables are set is the path torchrun takes.
    body = ('    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:\n'
            '        os.environ["MASTER_ADDR"] = "localhost"')
    assert _ddp015(tmp_path, body) == [("trainer.py", 7)]


def test_a_helpers_fallback_writes_stay_clean(tmp_path):
    for i, body in enumerate((
        '    if "MASTER_ADDR" not in os.environ:\n        os.environ["MASTER_ADDR"] = "localhost"',
        '    os.environ.setdefault("MASTER_PORT", "12355")',
        '    if "RANK" in os.environ:\n        pass\n    else:\n        os.environ["MASTER_ADDR"] = "localhost"',
        '    os.environ["MASTER_PORT"] = str(find_free_port())',
    )):
        assert _ddp015(tmp_path / str(i), body) == [], body


# --- DDP018: a torchmetrics metric synchronised at compute(), a split taken from a dict --------

METRIC_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchmetrics import MeanMetric


def train(rank, model, splits):
    train_loader = DataLoader(splits["train"], batch_size=8, sampler=DistributedSampler(splits["train"]))
    eval_loader = DataLoader(splits["test"], batch_size=8, sampler=DistributedSampler(splits["test"]))
    for epoch in range(3):
        for batch in train_loader:
            model(batch).sum().backward()
        val_loss = MeanMetric({options}).to(rank)
        with torch.no_grad():
            for batch in eval_loader:
                val_loss.update(model(batch).mean())
        print(val_loss.compute())


if __name__ == "__main__":
    dist.init_process_group("nccl")
"""


def _metric(tmp_path: Path, options: str = "") -> list[int]:
    found = lint_project(tmp_path, {"train.py": METRIC_SCRIPT.replace("{options}", options)}, "train.py",
                         select="DDP018")
    return [f["location"]["line"] for f in found]


def test_a_torchmetrics_metric_computed_over_a_padded_eval_shard_is_reported(tmp_path):
    # The eval sampler is made inside `eval_loader = DataLoader(...)` over `splits["test"]`.
    assert _metric(tmp_path) == [11]


def test_a_metric_that_does_not_synchronise_stays_clean(tmp_path):
    assert _metric(tmp_path, "sync_on_compute=False") == []


URL_SCRIPT = """\
import os
import torch.distributed as dist

RANK = int(os.environ.get("RANK", 0))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))
MASTER_ADDR = "localhost"
MASTER_PORT = {port}


def setup():
    init_method = f"tcp://{MASTER_ADDR}:{MASTER_PORT}"
    dist.init_process_group("gloo", init_method=init_method, rank=RANK, world_size=WORLD_SIZE)


if __name__ == "__main__":
    setup()
"""


def test_an_init_method_formatted_from_literal_names_is_hard_coded(tmp_path):
    found = lint_project(tmp_path, {"train.py": URL_SCRIPT.replace("{port}", '"8080"')}, "train.py", select="DDP015")
    assert [f["location"]["line"] for f in found] == [12]


def test_an_init_method_formatted_from_the_environment_is_not(tmp_path):
    script = URL_SCRIPT.replace("{port}", 'os.environ.get("MASTER_PORT", "8080")')
    assert lint_project(tmp_path, {"train.py": script}, "train.py", select="DDP015") == []


def test_calls_after_an_early_exit_on_rank_0_are_each_reported(tmp_path):
    script = BRANCH_SCRIPT.replace(
        "    if dist.get_rank() == 0:\n        print(reduce_mean(train_loss))",
        "    if dist.get_rank() != 0:\n        return\n    if True:\n        print(reduce_mean(train_loss))")
    found = lint_project(tmp_path, {"train.py": script.replace("{tail}", "")}, "train.py", select="DDP009")
    assert sorted(f["location"]["line"] for f in found) == [20, 21, 22]


def test_the_same_collective_with_other_work_between_is_reported_at_each_call(tmp_path):
    # A barrier before and after a rank-0 evaluation: two places where the ranks part.
    script = BRANCH_SCRIPT.replace(
        "        print(reduce_mean(train_loss))\n        print(reduce_mean(val_loss))\n        dist.barrier()",
        "        dist.barrier()\n        print(train_loss.item())\n        dist.barrier()")
    found = lint_project(tmp_path / "apart", {"train.py": script.replace("{tail}", "")}, "train.py", select="DDP009")
    assert sorted(f["location"]["line"] for f in found) == [18, 20]


# --- DDP001: a loader over the evaluation set, whatever it is called -------------------------

CALIBRATION = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import build_dataset


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dataset_train, dataset_val = build_dataset(args)
        sampler_train = torch.utils.data.DistributedSampler(dataset_train)
        data_loader_train = torch.utils.data.DataLoader(dataset_train, sampler=sampler_train, batch_size=64)
        data_loader_sampler = torch.utils.data.DataLoader(
            DATASET, sampler=torch.utils.data.SequentialSampler(DATASET), batch_size=64)
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        calibrate(data_loader_sampler, model)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        for epoch in range(args.epochs):
            sampler_train.set_epoch(epoch)
            for x, y in data_loader_train:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
        dist.destroy_process_group()


    def calibrate(loader, model):
        with torch.no_grad():
            for x, _ in loader:
                model(x.cuda())
    """


def test_a_loader_over_the_evaluation_set_is_no_unsharded_training_loader(tmp_path):
    source = CALIBRATION.replace("DATASET", "dataset_val")
    assert lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP001") == []


def test_a_loader_over_the_training_set_without_a_sampler_is_still_reported(tmp_path):
    # (Read with back-propagation: a loader read only under no_grad feeds an evaluation.)
    source = CALIBRATION.replace("DATASET", "dataset_train").replace(
        "        with torch.no_grad():\n            for x, _ in loader:\n                model(x.cuda())\n",
        "        for x, _ in loader:\n            model(x.cuda()).sum().backward()\n")
    assert "backward()\n" in source
    found = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP001")
    assert [(f["code"], f["location"]["line"]) for f in found] == [("DDP001", 15)]


# --- DDP001: a loader builder called from both the distributed and the single-process branch --

TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, config, processor):
            self.config = config
            if self.config.is_use_DDP is True:
                self.train_dataloader = self.create_DDP_dataloader(processor.train_set())
                self.dev_dataloader = self.create_dataloader(processor.dev_set())
                self.test_dataloader = self.create_dataloader(processor.test_set())
            else:
                self.train_dataloader = self.create_dataloader(processor.train_set())
                self.dev_dataloader = self.create_dataloader(processor.dev_set())

        def create_DDP_dataloader(self, dataset):
            self.sampler = DistributedSampler(dataset, seed=self.config.seed)
            if self.config.is_use_DDP is True:
                return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=False, sampler=self.sampler)
            else:
                return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=True)

        def create_dataloader(self, dataset):
            return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=False)

        def train(self, model, optimizer):
            for epoch in range(self.config.epochs):
                self.sampler.set_epoch(epoch)
                for x, y in self.train_dataloader:
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()


    def main(config, processor):
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
        trainer = Trainer(config, processor)
        trainer.train(model, torch.optim.SGD(model.parameters(), lr=config.lr))
        dist.destroy_process_group()
    """


def test_a_builder_the_distributed_branch_calls_only_for_dev_and_test_sets_is_not_reported(tmp_path):
    # `is_use_DDP is True` is the distributed branch: there the plain builder makes only the
    # dev and test loaders; its training loader belongs to the single-process `else`.
    assert lint_project(tmp_path, {"train.py": TRAINER}, "train.py", select="DDP001") == []


def test_the_same_builder_making_the_training_loader_on_the_distributed_branch_is_reported(tmp_path):
    source = TRAINER.replace("self.train_dataloader = self.create_DDP_dataloader(processor.train_set())",
                             "self.train_dataloader = self.create_dataloader(processor.train_set())")
    found = lint_project(tmp_path, {"train.py": source}, "train.py", select="DDP001")
    assert [(f["code"], f["location"]["line"]) for f in found] == [("DDP001", 25)]
