"""`not args.multiprocessing_distributed or rank == 0` is a rank-0 test on the spawned path only
when a torchrun job can also run without the flag. Where the flag is what sets the process group
up (the only `init_process_group` runs under it), a run without it is one process, and the test
guards rank 0 on every launch path. Through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

# The flag gates the torchrun set-up itself: without it the script trains on one GPU.
FLAG_GATES_GROUP = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    IMPORTS
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiprocessing-distributed", action="store_true")
    parser.add_argument("--epochs", type=int, default=10)


    def write_state(state, is_best, path="last.pth"):
        torch.save(state, path)


    def main():
        args = parser.parse_args()
        if args.multiprocessing_distributed:
            local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local_rank)
            SETUP
        model = torch.nn.Linear(8, 8).cuda()
        if args.multiprocessing_distributed:
            model = DDP(model, device_ids=[local_rank])
        for epoch in range(args.epochs):
            model(torch.randn(4, 8).cuda()).sum().backward()
            if GUARD:
                write_state({"model": model.state_dict(), "epoch": epoch}, False)


    if __name__ == "__main__":
        main()
    """

INIT = 'dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))'
BOTH_SPELLINGS = "not args.multiprocessing_distributed or (args.multiprocessing_distributed and dist.get_rank() == 0)"


def _main(guard: str, setup: str = INIT, imports: str = "") -> str:
    return FLAG_GATES_GROUP.replace("SETUP", setup).replace("GUARD", guard).replace("    IMPORTS\n", imports)


def _saves(tmp_path, guard: str, setup: str = INIT, imports: str = "",
           extra: dict[str, str] | None = None) -> set[tuple[str, int, str]]:
    files = {"main.py": _main(guard, setup, imports)}
    files.update(extra or {})
    _write(tmp_path, files)
    return _findings(tmp_path, "main.py", select="DDP010")


def test_the_flag_that_sets_the_group_up_makes_its_rank_test_hold_on_rank_zero_only(tmp_path):
    assert _saves(tmp_path, BOTH_SPELLINGS) == set()


def test_the_short_spelling_of_the_same_test_is_read_alike(tmp_path):
    assert _saves(tmp_path, "not args.multiprocessing_distributed or dist.get_rank() == 0") == set()


def test_a_set_up_helper_of_another_module_called_under_the_flag_counts_as_gated(tmp_path):
    helper = """\
        import os

        import torch.distributed as dist


        def init_group():
            dist.init_process_group("nccl", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        """
    found = _saves(tmp_path, BOTH_SPELLINGS, setup="init_group()", imports="\n    from dist_setup import init_group\n",
                   extra={"dist_setup.py": helper})
    assert found == set()


def test_a_group_also_set_up_without_the_flag_leaves_the_test_true_on_every_torchrun_rank(tmp_path):
    # A second set-up outside the flag (here: on WORLD_SIZE alone): a torchrun job without the
    # flag is distributed, and `not args.multiprocessing_distributed` holds on all its ranks.
    text = _main(BOTH_SPELLINGS).replace(
        "        model = torch.nn.Linear(8, 8).cuda()\n",
        "        elif int(os.environ.get(\"WORLD_SIZE\", 1)) > 1:\n"
        f"            {INIT}\n"
        "            local_rank = int(os.environ[\"LOCAL_RANK\"])\n"
        "        model = torch.nn.Linear(8, 8).cuda()\n")
    _write(tmp_path, {"main.py": text})
    assert _findings(tmp_path, "main.py", select="DDP010") == {("main.py", 13, "DDP010")}


def test_a_helper_of_another_module_called_without_the_flag_leaves_the_test_unread(tmp_path):
    helper = """\
        import os

        import torch.distributed as dist


        def init_group():
            if int(os.environ.get("WORLD_SIZE", 1)) > 1:
                dist.init_process_group("nccl")
        """
    text = _main(BOTH_SPELLINGS, imports="\n    from dist_setup import init_group\n").replace(
        "        model = torch.nn.Linear(8, 8).cuda()\n",
        "        init_group()\n        model = torch.nn.Linear(8, 8).cuda()\n")
    _write(tmp_path, {"main.py": text, "dist_setup.py": helper})
    assert _findings(tmp_path, "main.py", select="DDP010") == {("main.py", 15, "DDP010")}
