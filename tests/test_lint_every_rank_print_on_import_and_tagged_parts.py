"""Console output in training loops (DDP020), through `ddpcheck lint`, where what keeps it off
the other ranks or tells their lines apart is written in ways the rule must follow:

- a project module that swaps `builtins.print` for a rank-0 print in its own top-level code,
  so importing it is the whole set-up (also one step further, through a package `__init__`);
  a module that swaps it only in a function nobody calls, or whose swap lets every rank print
  on large jobs, silences nothing;
- a progress line kept in parts (`head, tail = f"[GPU {rank}] ...", ""`, then `head += "#"`
  and `print(head + tail, end="\\r")`): the rank is in the message;
- a print of spaces only, wiping the line before it is redrawn: nothing shows."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    {imports}


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
        for epoch in range(90):
            for x, y in loader:
                loss = model(x, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print("epoch %d loss %.3f" % (epoch, loss.item()))


    if __name__ == "__main__":
        main()
    """

# The swap runs when the module is loaded: the last statements of the file.
COMM = """\
    import builtins

    import torch.distributed as dist

    _world_rank = -1
    _plain_print = builtins.print


    def init(backend="nccl"):
        global _world_rank
        dist.init_process_group(backend)
        _world_rank = dist.get_rank()


    def _print_on_first(*args, **kwargs):
        if _world_rank <= 0 or kwargs.pop("everywhere", False):
            _plain_print(*args, **kwargs)


    {swap}
    """


def test_a_module_that_swaps_print_when_imported_silences_the_loop_prints(tmp_path) -> None:
    write_project(tmp_path, {"train.py": TRAIN.format(imports="import comm_utils as comm"),
                             "comm_utils.py": COMM.format(swap="builtins.print = _print_on_first")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_a_package_init_that_imports_the_swapping_module_silences_too(tmp_path) -> None:
    write_project(tmp_path, {"train.py": TRAIN.format(imports="from dist_tools import init"),
                             "dist_tools/__init__.py": "from .comm_utils import init\n",
                             "dist_tools/comm_utils.py": COMM.format(swap="builtins.print = _print_on_first")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_a_swap_inside_a_function_nobody_calls_silences_nothing(tmp_path) -> None:
    # Only the import runs: the function holding the swap is never called.
    swap = "def quiet_other_ranks():\n        builtins.print = _print_on_first"
    write_project(tmp_path, {"train.py": TRAIN.format(imports="import comm_utils as comm"),
                             "comm_utils.py": COMM.format(swap=swap)})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 22, "DDP020")}


def test_a_swap_that_lets_every_rank_print_past_a_world_size_still_silences(tmp_path) -> None:
    # The size a job is launched at is not in the code: the override silences the launches a
    # repository documents for one node, and lint stays silent rather than guess a larger one.
    comm = COMM.format(swap="builtins.print = _print_on_first").replace(
        'if _world_rank <= 0 or kwargs.pop("everywhere", False):',
        "if _world_rank <= 0 or dist.get_world_size() > 8:")
    write_project(tmp_path, {"train.py": TRAIN.format(imports="import comm_utils as comm"),
                             "comm_utils.py": comm})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_without_the_import_the_loop_print_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": TRAIN.format(imports=""),
                             "comm_utils.py": COMM.format(swap="builtins.print = _print_on_first")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 22, "DDP020")}


PROGRESS = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(gpu, world_size, loaders):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=gpu, world_size=world_size)
        torch.cuda.set_device(gpu)
        net = DDP(build_net().to(gpu), device_ids=[gpu])
        opt = torch.optim.SGD(net.parameters(), lr=0.01 * world_size)
        loader = loaders[gpu]
        for epoch in range(30):
            {wipe}
            {head}
            print(bar, end="\\r")
            for i, (x, y) in enumerate(loader):
                if i % 10 == 0:
                    bar += "="
                    print(bar + stats, end="\\r")
                loss = net(x.to(gpu), y.to(gpu))
                opt.zero_grad()
                loss.backward()
                opt.step()
                stats = " loss=%.3f" % loss.item()
                print(bar + stats, end="\\r")


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n, make_loaders(n)), nprocs=n)
    """


def test_a_progress_line_kept_in_parts_that_names_the_rank_is_quiet(tmp_path) -> None:
    code = PROGRESS.format(wipe='print(" " * 120, end="\\r")',
                           head='bar, stats = f"[GPU {gpu}] epoch {epoch}: ", ""')
    write_project(tmp_path, {"train.py": code})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_a_progress_line_kept_in_parts_without_the_rank_is_reported(tmp_path) -> None:
    code = PROGRESS.format(wipe='print(" " * 120, end="\\r")',
                           head='bar, stats = f"epoch {epoch}: ", ""')
    write_project(tmp_path, {"train.py": code})
    # Every print of the line is reported but the one that only wipes it (line 14).
    assert finding_set(tmp_path, "train.py", select="DDP020") == {
        ("train.py", 16, "DDP020"), ("train.py", 20, "DDP020"), ("train.py", 26, "DDP020")}


def test_a_line_of_text_beside_the_spaces_is_still_output(tmp_path) -> None:
    code = PROGRESS.format(wipe='print(" " * 120, "|", end="\\r")',
                           head='bar, stats = f"[GPU {gpu}] epoch {epoch}: ", ""')
    write_project(tmp_path, {"train.py": code})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 14, "DDP020")}


def test_an_empty_line_printed_on_every_rank_is_still_output(tmp_path) -> None:
    # `print("")` and spaces ending in a new line each leave a line per rank.
    for wipe in ('print("")', 'print(" " * 120)'):
        code = PROGRESS.format(wipe=wipe, head='bar, stats = f"[GPU {gpu}] epoch {epoch}: ", ""')
        write_project(tmp_path, {"train.py": code})
        assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 14, "DDP020")}
