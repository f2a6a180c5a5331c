"""Values that reach a call through `**kwargs`, parameter defaults and text that only looks like
code, through `ddpcheck lint`: each test writes a small project in that style and reads what the
user sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import lint_project


def _lint(root: Path, files: dict[str, str], target: str, select: str) -> list[tuple[str, str, int]]:
    """(code, file name, line) of each finding, sorted."""
    return sorted((f["code"], Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(root, files, target, select=select))


FRAMEWORK = """\
    import torch


    class Framework:
        def __init__(self, model, loss, lr=1e-3):
            self.model = model
            self.loss = loss
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)


    class DistributedFramework(Framework):
        def __init__(self, dataset, **kwargs):
            super().__init__(**kwargs)
            self.dataset = dataset
"""

SCRIPT = """\
    import torch
    from torch.distributed import init_process_group, destroy_process_group
    from framework import DistributedFramework

    if __name__ == "__main__":
        init_process_group("gloo")
        net = torch.nn.Linear(2, 1)
        trainer = DistributedFramework(dataset=[1, 2, 3], model=net, loss=torch.nn.MSELoss(),
                                       lr={lr})
        destroy_process_group()
"""


def test_a_literal_rate_passed_through_kwargs_to_the_base_constructor(tmp_path):
    found = _lint(tmp_path, {"framework.py": FRAMEWORK, "train.py": SCRIPT.format(lr="0.5")}, "train.py", "DDP004")
    assert found == [("DDP004", "train.py", 9)]  # where the literal is written


def test_a_rate_from_the_command_line_through_kwargs_stays_clean(tmp_path):
    script = SCRIPT.format(lr="float(sys.argv[1])").replace("import torch\n", "import sys\nimport torch\n", 1)
    assert _lint(tmp_path, {"framework.py": FRAMEWORK, "train.py": script}, "train.py", "DDP004") == []


def test_a_rate_scaled_by_the_world_size_through_kwargs_stays_clean(tmp_path):
    script = SCRIPT.format(lr="0.5 * torch.distributed.get_world_size()")
    assert _lint(tmp_path, {"framework.py": FRAMEWORK, "train.py": script}, "train.py", "DDP004") == []


def test_a_default_the_run_relies_on_is_reported_where_it_is_written(tmp_path):
    # The caller does not pass lr: the signature's 1e-3 is the rate every rank trains with.
    script = SCRIPT.replace(",\n                                       lr={lr})", ")")
    assert _lint(tmp_path, {"framework.py": FRAMEWORK, "train.py": script}, "train.py", "DDP004") == [
        ("DDP004", "framework.py", 5)]


WRAPPER = """\
    import torch
    import torch.optim as optim


    class TrainingWrapper:
        def __init__(self, rank, model, loader, batch_size=100, optimizer_class=optim.Adam,
                     optimizer_args={"lr": 0.001, "weight_decay": 2e-4}):
            self.model = model
            self.loader = loader
            self.optimizer = optimizer_class(self.model.parameters(), **optimizer_args)
"""

WRAPPER_SCRIPT = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from wrapper import TrainingWrapper


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(rank), device_ids=[rank])
        trainer = TrainingWrapper(rank, model, [], batch_size=10{args})
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
"""


def test_a_rate_in_a_default_optimizer_args_dict_of_a_wrapper(tmp_path):
    files = {"wrapper.py": WRAPPER, "train.py": WRAPPER_SCRIPT.format(args="")}
    assert _lint(tmp_path, files, "train.py", "DDP004") == [("DDP004", "wrapper.py", 7)]


def test_optimizer_args_passed_by_the_caller_replace_the_default(tmp_path):
    args = ', optimizer_args={"lr": 1e-3 * dist.get_world_size()}'
    files = {"wrapper.py": WRAPPER, "train.py": WRAPPER_SCRIPT.format(args=args)}
    assert _lint(tmp_path, files, "train.py", "DDP004") == []


MODULE_CONSTANT_RATE = """\
    import torch
    import torch.distributed as dist
    from torch.optim import Adam

    LEARNING_RATE = 1e-3
    BATCH_SIZE = 64


    def main_worker(gpu, ngpus_per_node, args):
        dist.init_process_group("nccl", rank=gpu, world_size=ngpus_per_node)
        {division}
        net = torch.nn.Linear(8, 8).cuda(gpu)
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[gpu])
        optimizer = Adam(net.parameters(), lr=LEARNING_RATE)
        return optimizer
"""


def test_a_commented_out_division_by_the_gpu_count_does_not_scale_anything(tmp_path):
    script = MODULE_CONSTANT_RATE.format(division="# args.batch_size = int(args.batch_size / ngpus_per_node)")
    assert _lint(tmp_path, {"train.py": script}, "train.py", "DDP004") == [("DDP004", "train.py", 14)]


def test_a_live_division_of_the_batch_by_the_gpu_count_keeps_the_global_batch(tmp_path):
    script = MODULE_CONSTANT_RATE.format(division="args.batch_size = int(args.batch_size / ngpus_per_node)")
    assert _lint(tmp_path, {"train.py": script}, "train.py", "DDP004") == []


def _forwarding_layers(levels: int, branches: int) -> str:
    """A helper module where each loader builder hands its `**options` down to the one below it
    from several call sites, as configuration-driven factories do."""
    parts = ["from torch.utils.data import DataLoader\n\n\n"
             "def make_loader_0(dataset, sampler=None, **options):\n"
             "    return DataLoader(dataset, sampler=sampler, **options)\n"]
    for level in range(1, levels):
        arms = "".join(f"    if options.get('variant') == {k}:\n"
                       f"        return make_loader_{level - 1}(dataset, **options)\n" for k in range(branches))
        parts.append(f"\n\ndef make_loader_{level}(dataset, **options):\n{arms}"
                     f"    return make_loader_{level - 1}(dataset, **options)\n")
    return "".join(parts)


LAYERED_SCRIPT = """\


import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 4))
    loader = make_loader_13(list(range(64)), batch_size=8, shuffle=True)
    for epoch in range(3):
        for batch in loader:
            model(batch).sum().backward()


if __name__ == "__main__":
    main()
"""


@pytest.mark.timeout(180)
def test_deep_kwargs_forwarding_finishes_and_other_rules_still_report(tmp_path):
    # Fourteen layers of builders, each reached from five call sites: following every chain
    # would take 5**13 steps. The lint must finish, stay silent where the chain is too deep to
    # follow (no sampler claim either way), and still report what it can read.
    source = _forwarding_layers(14, 4) + LAYERED_SCRIPT
    found = _lint(tmp_path, {"train.py": source}, "train.py", select="DDP0")
    init_line = source.splitlines().index('    dist.init_process_group("gloo")') + 1
    assert found == [("DDP005", "train.py", init_line)]
