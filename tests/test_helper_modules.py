"""Helper modules: rules see what the project's own modules do — setup, teardown, collectives,
saves, launch helpers — read from their source, never imported, with every rule on."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.model import Project
from ddpcheck.lint.rules import rule_classes
from tests.conftest import cli_env
from tests.helpers import run_lint


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def codes(path: Path, facts: Project | None = None, select: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    rules = [r for r in rule_classes() if not select or r.code in select]
    found = lint_source(str(path), path.read_text(), rules, facts or Project())
    return sorted((f.code, f.line) for f in found)


UTILS_TORCHRUN = """
import os
import torch
import torch.distributed as dist

def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.gpu)
    dist.init_process_group("nccl", init_method=args.dist_url)

def setup_for_distributed(is_master):
    import builtins
    builtin_print = builtins.print
    def print(*args, **kwargs):
        if is_master or kwargs.pop("force", False):
            builtin_print(*args, **kwargs)
    builtins.print = print

def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)
"""

TRAIN = """
import os
from utils import init_distributed_mode, setup_for_distributed

os.environ["MASTER_PORT"] = "29500"
init_distributed_mode(args)
setup_for_distributed(args.rank == 0)
for epoch in range(3):
    for x, y in loader:
        model(x).sum().backward()
    print("epoch", epoch)
"""


def test_helper_reading_launcher_env_makes_the_script_torchrun_launched(tmp_path):
    write(tmp_path, {"train.py": TRAIN, "utils.py": UTILS_TORCHRUN})
    assert ("DDP015", 4) in codes(tmp_path / "train.py", select=("DDP015",))


def test_without_the_helper_module_nothing_is_assumed(tmp_path):
    write(tmp_path, {"train.py": TRAIN})
    assert codes(tmp_path / "train.py", select=("DDP015",)) == []


def test_print_silenced_by_a_helper_is_not_reported(tmp_path):
    write(tmp_path, {"train.py": TRAIN, "utils.py": UTILS_TORCHRUN})
    assert codes(tmp_path / "train.py", select=("DDP020",)) == []
    # The same script without the silencing helper prints on every rank.
    write(tmp_path, {"train.py": TRAIN.replace("setup_for_distributed(args.rank == 0)\n", "")})
    assert ("DDP020", 9) in codes(tmp_path / "train.py", select=("DDP020",))


def test_package_modules_and_relative_imports(tmp_path):
    write(tmp_path, {
        "pyproject.toml": "[project]\nname = 'x'\n",
        "src/proj/__init__.py": "",
        "src/proj/launch/__init__.py": "from .spawner import launch\n",
        "src/proj/launch/spawner.py": """
            import torch.multiprocessing as mp
            def launch(fn, n):
                mp.spawn(fn, nprocs=n)
        """,
        "src/proj/tools/__init__.py": "",
        "src/proj/tools/run.py": """
            from ..launch import launch
            from . import helpers
            launch(helpers.work, 2)
        """,
        "src/proj/tools/helpers.py": "def work(rank):\n    pass\n",
        "scripts/go.py": """
            from proj.launch.spawner import launch as start
            start(print, 2)
        """,
    })
    # Relative import through a package __init__ that re-exports the function.
    assert codes(tmp_path / "src/proj/tools/run.py", select=("DDP017",)) == [("DDP017", 3)]
    # Absolute import from a script folder, found through the project's src/ root.
    assert codes(tmp_path / "scripts/go.py", select=("DDP017",)) == [("DDP017", 2)]


def test_helper_module_is_parsed_once_per_run(tmp_path):
    write(tmp_path, {"a.py": TRAIN, "b.py": TRAIN, "utils.py": UTILS_TORCHRUN})
    facts = Project()
    codes(tmp_path / "a.py", facts)
    codes(tmp_path / "b.py", facts)
    assert facts.parsed == 1


def test_facts_through_a_chain_of_modules(tmp_path):
    write(tmp_path, {
        "train.py": """
            import dist_util
            from torch.utils.data import DataLoader
            dist_util.setup_dist()
            loader = DataLoader(dataset, batch_size=8, shuffle=True)
        """,
        "dist_util.py": """
            from core import really_setup
            def setup_dist():
                really_setup()
        """,
        "core.py": """
            import torch.distributed as dist
            def really_setup():
                dist.init_process_group("gloo")
        """,
    })
    # The file uses DDP only through dist_util → core: DDP001 applies.
    assert ("DDP001", 4) in codes(tmp_path / "train.py", select=("DDP001",))
    facts = Project()
    path = tmp_path / "train.py"
    from ddpcheck.lint.engine import model_of

    model = model_of(str(path), path.read_text(), facts)
    setup = next(c for c in model.root.calls if c.dotted == "dist_util.setup_dist")
    assert model.facts.does(setup, "init_process_group")
    assert not model.facts.does(setup, "set_device")


def test_mutual_recursion_between_modules_terminates(tmp_path):
    write(tmp_path, {
        "main.py": "from a import f\nf()\n",
        "a.py": "from b import g\ndef f():\n    g()\n",
        "b.py": "from a import f\nimport torch.multiprocessing as mp\ndef g():\n    f()\n    mp.spawn(w, nprocs=2)\n",
    })
    assert codes(tmp_path / "main.py", select=("DDP017",)) == [("DDP017", 2)]


def test_helpers_are_never_imported_nor_read_from_site_packages(tmp_path):
    marker = tmp_path / "executed.txt"
    site = tmp_path / "env" / "lib" / "site-packages"
    write(tmp_path, {
        "proj/train.py": "import sidecar\nimport installed\nsidecar.go()\ninstalled.go()\n",
        "proj/sidecar.py": f"open({str(marker)!r}, 'w').write('ran')\n"
                           "import torch.multiprocessing as mp\ndef go():\n    mp.spawn(w, nprocs=2)\n",
    })
    write(site, {"installed.py": "import torch.multiprocessing as mp\ndef go():\n    mp.spawn(w, nprocs=2)\n"})
    env = cli_env(PYTHONPATH=f"{cli_env()['PYTHONPATH']}:{site}")
    r = run_lint("--output-format", "json", str(tmp_path / "proj/train.py"), env=env)
    assert r.returncode == 1, r.stderr
    found = sorted((f["code"], f["location"]["line"]) for f in json.loads(r.stdout)["findings"])
    assert found == [("DDP017", 3)]  # sidecar's spawn is seen; installed (site-packages) is not
    assert not marker.exists()


SPAWNING_HELPER = "import torch.multiprocessing as mp\ndef go():\n    mp.spawn(w, nprocs=2)\n"


def test_folders_the_project_adds_to_sys_path_are_searched(tmp_path):
    # The script adds ../lib itself; a helper module of another tool adds it through a function.
    write(tmp_path, {
        "tools/run.py": "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'lib'))\n"
                        "import launch\nlaunch.go()\n",
        "other/_paths.py": "import sys\nfrom pathlib import Path\ndef add(p):\n    sys.path.insert(0, p)\n"
                           "add(str(Path(__file__).resolve().parent.parent / 'lib'))\n",
        "other/run.py": "import _paths\nfrom launch import go\ngo()\n",
        "lib/launch.py": SPAWNING_HELPER,
    })
    assert codes(tmp_path / "tools/run.py", select=("DDP017",)) == [("DDP017", 4)]
    assert codes(tmp_path / "other/run.py", select=("DDP017",)) == [("DDP017", 3)]


def test_a_sys_path_entry_that_cannot_be_told_adds_nothing(tmp_path):
    # From the environment, from a name bound twice, from a function's result: unknown, so the
    # helper stays unresolved and nothing is reported.
    for n, added in enumerate(("os.environ['LIB']", "where", "find_lib()")):
        write(tmp_path, {
            f"t{n}/run.py": f"import os, sys\nwhere = '../lib'\nwhere = '../lib2'\nsys.path.insert(0, {added})\n"
                            "import launch\nlaunch.go()\n",
            "lib/launch.py": SPAWNING_HELPER,
        })
        assert codes(tmp_path / f"t{n}/run.py", select=("DDP017",)) == [], added


def test_an_ordinary_import_root_wins_over_an_added_folder(tmp_path):
    write(tmp_path, {
        "run.py": "import sys\nsys.path.append('lib')\nimport launch\nlaunch.go()\n",
        "launch.py": "def go():\n    pass\n",  # next to the script: found first, as Python does
        "lib/launch.py": SPAWNING_HELPER,
    })
    assert codes(tmp_path / "run.py", select=("DDP017",)) == []


def test_a_sys_path_entry_into_site_packages_is_not_read(tmp_path):
    site = tmp_path / "env" / "lib" / "site-packages"
    write(site, {"launch.py": SPAWNING_HELPER})
    write(tmp_path, {"proj/run.py": f"import sys\nsys.path.append({str(site)!r})\nimport launch\nlaunch.go()\n"})
    assert codes(tmp_path / "proj/run.py", select=("DDP017",)) == []


def test_a_file_is_parsed_once_whether_linted_or_imported(tmp_path, monkeypatch):
    write(tmp_path, {"a.py": TRAIN, "utils.py": UTILS_TORCHRUN})
    import libcst

    parses = []
    real = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda src, *a, **k: parses.append(src) or real(src, *a, **k))
    facts = Project()
    codes(tmp_path / "a.py", facts)  # parses a.py, then utils.py as its helper
    codes(tmp_path / "utils.py", facts)  # linted now: reuses the helper's tree
    assert len(parses) == 2
    # And the other way round: a linted file answers a later import without a parse.
    parses.clear()
    facts = Project()
    codes(tmp_path / "utils.py", facts)
    codes(tmp_path / "a.py", facts)
    assert len(parses) == 2 and facts.parsed == 0


def test_collectives_balanced_by_a_context_manager_do_not_make_a_helper_a_collective(tmp_path):
    write(tmp_path, {
        "utils/__init__.py": "",
        "utils/torch_utils.py": """
            from contextlib import contextmanager
            import torch.distributed as dist

            @contextmanager
            def torch_distributed_zero_first(local_rank):
                if local_rank not in [-1, 0]:
                    dist.barrier(device_ids=[local_rank])
                yield
                if local_rank == 0:
                    dist.barrier(device_ids=[0])

            def sync_all():
                dist.barrier()
        """,
        "utils/dataloaders.py": """
            from utils.torch_utils import torch_distributed_zero_first

            def create_dataloader(path, rank=-1):
                with torch_distributed_zero_first(rank):
                    dataset = load(path)
                return dataset
        """,
        "train.py": """
            import os
            import torch.distributed as dist
            from utils.dataloaders import create_dataloader
            from utils.torch_utils import sync_all
            RANK = int(os.getenv("RANK", -1))
            dist.init_process_group("nccl")
            if RANK in {-1, 0}:
                val_loader = create_dataloader("val", rank=-1)
                sync_all()
            dist.destroy_process_group()
        """,
    })
    # Only the helper that really performs an unpaired collective is reported.
    assert codes(tmp_path / "train.py", select=("DDP009",)) == [("DDP009", 9)]


# --- the DDP setup of a script in a helper module of its project ---------------------------------
def _write_project(root: Path, files: dict[str, str]) -> Path:
    write(root, files)
    return root / "train.py"


def found(path: Path) -> set[tuple[str, int]]:
    """Every rule's findings on `path`: (code, line)."""
    return set(codes(path))


DIST_UTIL = """
import os
import torch
import torch.distributed as dist

def setup_dist():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    return local_rank

def cleanup():
    dist.destroy_process_group()

def reduce_mean(t):
    dist.all_reduce(t)
    return t / dist.get_world_size()

def save_checkpoint(state, path):
    torch.save(state, path)

def save_on_master(state, path):
    if dist.get_rank() == 0:
        torch.save(state, path)

def train_one_epoch(model, loader, epoch):
    loader.sampler.set_epoch(epoch)
    for batch in loader:
        model(batch).sum().backward()
"""


def test_setup_and_teardown_in_a_helper_module_are_seen(tmp_path):
    train = _write_project(tmp_path, {"dist_util.py": DIST_UTIL, "train.py": """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        import dist_util

        def main():
            local_rank = dist_util.setup_dist()
            model = torch.nn.parallel.DistributedDataParallel(net.cuda(), device_ids=[local_rank])
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, sampler=sampler)
            for epoch in range(10):
                dist_util.train_one_epoch(model, loader, epoch)
                dist_util.save_on_master(model.module.state_dict(), "ckpt.pt")
            dist_util.cleanup()

        if __name__ == "__main__":
            main()
        """})
    # set_device (DDP003), destroy (DDP005), set_epoch (DDP002) and the guarded save (DDP010)
    # all happen in dist_util.py.
    assert found(train) == set()


def test_pitfalls_hidden_in_helper_calls_are_reported(tmp_path):
    train = _write_project(tmp_path, {"dist_util.py": DIST_UTIL, "train.py": """
        import torch.distributed as dist
        from dist_util import reduce_mean, save_checkpoint, setup_dist

        def main():
            setup_dist()
            for epoch in range(10):
                loss = step()
                if dist.get_rank() == 0:
                    print(reduce_mean(loss))
                save_checkpoint({"epoch": epoch}, "ckpt.pt")

        if __name__ == "__main__":
            main()
        """})
    assert found(train) == {
        ("DDP005", 8),  # dist_util.py's init_process_group: the group it creates is never destroyed
        ("DDP009", 9),  # reduce_mean all-reduces, on rank 0 only: hang
        ("DDP010", 19),  # dist_util.py's torch.save: save_checkpoint runs on every rank
    }


def test_launcher_flag_is_fine_when_a_helper_reads_local_rank(tmp_path):
    files = {"utils.py": """
        import os
        import torch.distributed as dist

        def init_distributed_mode(args):
            args.gpu = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl")
        """}
    script = """
        import argparse
        {imports}
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        args = parser.parse_args()
        {setup}
        """
    helper = _write_project(tmp_path, {**files, "train.py": script.format(
        imports="from utils import init_distributed_mode", setup="init_distributed_mode(args)")})
    assert ("DDP008", 4) not in found(helper)
    alone = _write_project(tmp_path, {"train.py": script.format(imports="import torch", setup="torch.cuda.set_device(args.local_rank)")})
    assert ("DDP008", 4) in found(alone)


def test_same_seed_through_a_seeding_helper_and_a_loader_builder(tmp_path):
    # DDP029 (off by default): the script seeds through the project's helper and builds its
    # loader (with the DistributedSampler) in another module; the call that passes the seed is
    # where the rank must be added. A seed with the rank added is not reported.
    write(tmp_path, {
        "main_pretrain.py": """
            import argparse

            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel

            from src.utils import fix_random_seeds
            from src.data import make_train_loader

            parser = argparse.ArgumentParser()
            parser.add_argument("--seed", type=int, default=31)
            parser.add_argument("--data_path", type=str)


            def main():
                args = parser.parse_args()
                dist.init_process_group("nccl")
                fix_random_seeds(args.seed)
                loader, sampler = make_train_loader(args.data_path, batch_size=64)
                model = DistributedDataParallel(build_model().cuda())
                for epoch in range(100):
                    sampler.set_epoch(epoch)
                    for images in loader:
                        model(images.cuda()).backward()


            if __name__ == "__main__":
                main()
        """,
        "src/__init__.py": "",
        "src/utils.py": """
            import numpy as np
            import torch

            def fix_random_seeds(seed=31):
                \"\"\"Fix random seeds.\"\"\"
                torch.manual_seed(seed)
                torch.cuda.manual_seed_all(seed)
                np.random.seed(seed)
        """,
        "src/data.py": """
            import torch
            from torchvision import datasets, transforms

            def make_train_loader(root, batch_size):
                augment = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
                dataset = datasets.ImageFolder(root, augment)
                sampler = torch.utils.data.distributed.DistributedSampler(dataset)
                loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=batch_size, num_workers=10)
                return loader, sampler
        """,
    })
    assert codes(tmp_path / "main_pretrain.py", select=("DDP029",)) == [("DDP029", 17)]
    assert codes(tmp_path / "src" / "utils.py", select=("DDP029",)) == []
    script = tmp_path / "main_pretrain.py"
    script.write_text(script.read_text().replace("fix_random_seeds(args.seed)",
                                                 "fix_random_seeds(args.seed + dist.get_rank())"))
    assert codes(script, select=("DDP029",)) == []


def test_a_sys_path_entry_relative_to_where_the_script_is_started(tmp_path):
    # The recipe is run from a folder where the clone is linked as `toolkit/`:
    # `sys.path.insert(0, 'toolkit/pytorch')` names the clone's own `pytorch/` folder.
    write(tmp_path, {
        "setup.py": "",
        "pytorch/launcher/run_xvector.py": """
            import sys
            import torch
            sys.path.insert(0, 'toolkit/pytorch')
            import libs.support.utils as utils
            utils.init_ddp()
            model = torch.nn.Linear(4, 4)
        """,
        "pytorch/libs/support/utils.py": """
            import torch
            def init_ddp(port=29500):
                torch.distributed.init_process_group(backend="nccl")
        """,
    })
    assert codes(tmp_path / "pytorch/launcher/run_xvector.py", select=("DDP005",)) == [("DDP005", 3)]


def test_a_relative_entry_that_names_no_folder_adds_nothing(tmp_path):
    write(tmp_path, {
        "setup.py": "",
        "pytorch/launcher/run_xvector.py": """
            import sys
            sys.path.insert(0, 'third_party/vendor')
            import launch
            launch.go()
        """,
        "pytorch/lib/launch.py": SPAWNING_HELPER,
    })
    assert codes(tmp_path / "pytorch/launcher/run_xvector.py", select=("DDP017",)) == []


TRAINER_MODULE = """
import torch
import libs.support.utils as utils

class BaseTrainer:
    def __init__(self, package):
        self.elements, self.params = package

    def select_device(self):
        return utils.select_model_device(self.elements["model"], self.params["gpu_id"])

    def run(self):
        raise NotImplementedError

class SimpleTrainer(BaseTrainer):
    def run(self):
        model = self.select_device()
        for epoch in range(self.params["epochs"]):
            torch.save(model.state_dict(), f"{epoch}.params")
"""

UTILS_SELECT_DEVICE = """
import torch
import torch.distributed as dist

def select_model_device(model, gpu_id):
    torch.cuda.set_device(gpu_id[dist.get_rank()])
    model.cuda()
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu_id[dist.get_rank()]])
"""


def test_a_namespace_package_imports_itself_by_its_absolute_name(tmp_path):
    # libs/ has no __init__.py; libs/training/trainer.py imports libs.support.utils, which works
    # only with the folder above libs/ on the path: the helper's set_device is seen.
    write(tmp_path, {
        "setup.py": "",
        "pytorch/launcher/run.py": """
            import sys
            import torch
            import torch.distributed as dist
            sys.path.insert(0, 'toolkit/pytorch')
            import libs.training.trainer as trainer
            dist.init_process_group("nccl")
            model = torch.nn.Linear(4, 4)
            trainer = trainer.SimpleTrainer(({"model": model}, {"gpu_id": [0, 1], "epochs": 3}))
            trainer.run()
            dist.destroy_process_group()
        """,
        "pytorch/libs/training/__init__.py": "",
        "pytorch/libs/training/trainer.py": TRAINER_MODULE,
        "pytorch/libs/support/__init__.py": "",
        "pytorch/libs/support/utils.py": UTILS_SELECT_DEVICE,
    })
    found = codes(tmp_path / "pytorch/launcher/run.py", select=("DDP003", "DDP010"))
    assert found == [("DDP010", 18)]  # the save in SimpleTrainer.run, on every rank; no DDP003


def test_a_module_name_rebound_to_an_instance_calls_the_instance_method(tmp_path):
    # `trainer` is the module until the assignment, then the instance: `trainer.run()` runs
    # SimpleTrainer.run (the base's run only raises).
    write(tmp_path, {
        "train.py": """
            import torch
            import torch.distributed as dist
            import pkg.trainer as trainer
            dist.init_process_group("nccl")
            model = torch.nn.Linear(4, 4)
            trainer = trainer.SimpleTrainer(({"model": model}, {"gpu_id": [0, 1], "epochs": 3}))
            trainer.run()
            dist.destroy_process_group()
        """,
        "pkg/__init__.py": "",
        "pkg/trainer.py": TRAINER_MODULE.replace("libs.support.utils", "pkg.utils"),
        "pkg/utils.py": UTILS_SELECT_DEVICE,
    })
    assert codes(tmp_path / "train.py", select=("DDP003", "DDP010")) == [("DDP010", 18)]
    # The instance under another name: the same.
    text = (tmp_path / "train.py").read_text().replace("trainer = trainer.", "runner = trainer.")
    (tmp_path / "train.py").write_text(text.replace("trainer.run()", "runner.run()"))
    assert codes(tmp_path / "train.py", select=("DDP003", "DDP010")) == [("DDP010", 18)]
