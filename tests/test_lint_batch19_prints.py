"""Every-rank output (DDP020) and which ranks run a block, on mechanisms seen on public scripts
around batch 19: each through `ddpcheck lint` on a small project written in the style of the
scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return sorted(f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select))


# One host process (local_rank == num_gpus) hands mini-batches to the GPU workers (the ranks
# below num_gpus) and tells each what to do next through a scatter: only worker 0 gets "save".
HOST_AND_WORKERS = """\
    import argparse
    import torch
    from tqdm import tqdm

    parser = argparse.ArgumentParser()
    parser.add_argument("--num_gpus", type=int, default=4)
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()

    torch.distributed.init_process_group(backend="gloo")
    nccl_group = torch.distributed.new_group(ranks=list(range(args.num_gpus)), backend="nccl")

    if args.local_rank {worker_test}:
        model = torch.nn.parallel.DistributedDataParallel(Net().cuda(), process_group=nccl_group)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        while True:
            my_state = [None]
            states = [None] * (args.num_gpus + 1)
            torch.distributed.scatter_object_list(my_state, states, src=args.num_gpus)
            if my_state[0] == -1:
                break
            elif my_state[0] == 2:
                torch.save(model.state_dict(), "model.pt")
            elif my_state[0] == 0:
                batch = [None]
                torch.distributed.scatter_object_list(batch, [None] * (args.num_gpus + 1), src=args.num_gpus)
                loss = model(batch[0]).sum()
                loss.backward()
                optimizer.step()
    {host_branch}
        for epoch in range(10):
            with tqdm(total=100) as pbar:
                for step in range(100 // args.num_gpus):
                    states = [0] * (args.num_gpus + 1)
                    torch.distributed.scatter_object_list([None], states, src=args.num_gpus)
                    torch.distributed.scatter_object_list([None], make_batches(), src=args.num_gpus)
                    pbar.update(args.num_gpus)
            print("epoch {{}} done".format(epoch))
            states = [4] * (args.num_gpus + 1)
            states[0] = 2
            torch.distributed.scatter_object_list([None], states, src=args.num_gpus)
        torch.distributed.scatter_object_list([None], [-1] * (args.num_gpus + 1), src=args.num_gpus)
"""


def test_host_process_past_the_gpu_workers_prints_once(tmp_path: Path) -> None:
    # The `else` of `if local_rank < num_gpus:` runs on the ranks from num_gpus up (the one host
    # process here): not every rank, so its loop's bar and prints are not repeated per worker.
    files = {"train.py": HOST_AND_WORKERS.format(worker_test="< args.num_gpus", host_branch="else:")}
    assert lines(tmp_path, files, "DDP020") == []


def test_host_branch_written_as_a_bound_is_not_every_rank(tmp_path: Path) -> None:
    files = {"train.py": HOST_AND_WORKERS.format(
        worker_test="< args.num_gpus", host_branch="if args.local_rank >= args.num_gpus:")}
    assert lines(tmp_path, files, "DDP020") == []


def test_the_same_loop_on_every_rank_is_still_reported(tmp_path: Path) -> None:
    # Without the rank split (a test of the launch, not of the rank), every rank runs the loop.
    files = {"train.py": HOST_AND_WORKERS.format(worker_test="!= -2", host_branch="if args.num_gpus > 0:")}
    assert lines(tmp_path, files, "DDP020") == [32, 38]


def test_save_under_a_scattered_state_is_not_every_rank(tmp_path: Path) -> None:
    # `if my_state[0] == 2:` tests the value this rank received from the scatter: the host sends
    # 2 to worker 0 only. Which ranks save is not known: no finding.
    files = {"train.py": HOST_AND_WORKERS.format(worker_test="< args.num_gpus", host_branch="else:")}
    assert lines(tmp_path, files, "DDP010") == []


def test_save_under_a_broadcast_state_is_every_rank(tmp_path: Path) -> None:
    # A broadcast gives every rank the same value: the branch runs on every worker.
    source = HOST_AND_WORKERS.format(worker_test="< args.num_gpus", host_branch="else:").replace(
        "torch.distributed.scatter_object_list(my_state, states, src=args.num_gpus)",
        "torch.distributed.broadcast_object_list(my_state, src=args.num_gpus)")
    assert lines(tmp_path, {"train.py": source}, "DDP010") == [23]


# Evaluation over image files (not a DataLoader): the model runs on a tensor loaded from a path
# derived from the loop's item in several steps.
IMAGE_FILES_TEST = """\
    import glob
    import os
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from tqdm import tqdm


    @torch.no_grad()
    def test_one_epoch(rank, gpu, model, args):
        model.eval()
        for path in {bar}:
            imgname, imgext = os.path.splitext(os.path.basename(path))
            path_lq = os.path.join(args.folder_lq, f"{{imgname}}x4{{imgext}}")
            img_lq = torch.from_numpy(np.load(path_lq)).unsqueeze(0) / 255
            img_rc = {forward}
            np.save(f"out/{{imgname}}.npy", img_rc.cpu().numpy())


    def main(gpu, args):
        dist.init_process_group("nccl", rank=gpu, world_size=args.world_size)
        model = torch.nn.parallel.DistributedDataParallel(Net().to(gpu), device_ids=[gpu])
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = (model(x.to(gpu)) - y.to(gpu)).abs().mean()
                loss.backward()
                optimizer.step()
            test_one_epoch(gpu, gpu, model, args)


    if __name__ == "__main__":
        mp.spawn(main, nprocs=2, args=(args,))
"""


def test_bar_over_files_whose_derived_tensor_the_model_runs_on(tmp_path: Path) -> None:
    source = IMAGE_FILES_TEST.format(bar="tqdm(sorted(glob.glob(args.folder_hq)))", forward="model(img_lq.to(gpu))")
    assert lines(tmp_path, {"train.py": source}, "DDP020") == [13]


def test_bar_over_files_guarded_by_rank_stays_clean(tmp_path: Path) -> None:
    source = IMAGE_FILES_TEST.format(bar="tqdm(sorted(glob.glob(args.folder_hq)), disable=rank != 0)",
                                     forward="model(img_lq.to(gpu))")
    assert lines(tmp_path, {"train.py": source}, "DDP020") == []


def test_bar_over_files_with_no_forward_is_not_an_evaluation(tmp_path: Path) -> None:
    # Copying files under a bar: no model runs on what the loop reads, so the bar is no
    # evaluation's; it is still output of a function the epoch loop calls at each epoch, reported
    # on the bar (its fix is `disable=`, on the bar, not a guard around the call).
    source = IMAGE_FILES_TEST.format(bar="tqdm(sorted(glob.glob(args.folder_hq)))", forward="img_lq * 2")
    assert lines(tmp_path, {"train.py": source}, "DDP020") == [13]


# A schedule helper that sets the rate and prints it, and a checkpoint helper that saves and
# prints, both called at each step or epoch of the training loop on every rank.
HELPERS = """\
    import numpy as np
    import torch


    def half_learning_rate(optimizer, epoch, args):
        lr = args.init_lr * (0.5 ** (np.array(args.half_list) < epoch).sum())
        print(epoch, lr)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        return lr


    def show_rate(epoch, lr):
        row = {}
        row["lr"] = lr
        print(epoch, row)


    def save_checkpoint(model, path):
        torch.save(model.module.state_dict(), path)
        print(f"Saved checkpoint: {path}")
"""

HELPERS_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from utils import half_learning_rate, save_checkpoint, show_rate


    def main(gpu, args):
        dist.init_process_group("nccl", rank=gpu, world_size=args.world_size)
        model = torch.nn.parallel.DistributedDataParallel(Net().to(gpu), device_ids=[gpu])
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(args.epochs):
            for x, y in loader:
                {schedule}
                loss = (model(x.to(gpu)) - y.to(gpu)).abs().mean()
                loss.backward()
                optimizer.step()
            {save}


    if __name__ == "__main__":
        mp.spawn(main, nprocs=2, args=(args,))
"""


def _found(tmp_path: Path, schedule: str, save: str) -> list[tuple[str, int]]:
    files = {"utils.py": HELPERS, "train.py": HELPERS_TRAIN.format(schedule=schedule, save=save)}
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, "train.py", "utils.py", select="DDP020"))


def test_output_of_a_helper_that_sets_the_rate_is_reported_at_the_print(tmp_path: Path) -> None:
    # Guarding the call would leave the rate unset on the other ranks: the print is the place.
    assert _found(tmp_path, "half_learning_rate(optimizer, epoch, args)", "pass") == [("utils.py", 7)]


def test_output_of_a_helper_that_saves_is_reported_at_the_print(tmp_path: Path) -> None:
    assert _found(tmp_path, "pass", 'save_checkpoint(model, "last.pt")') == [("utils.py", 21)]


def test_a_printer_is_still_reported_where_the_loop_calls_it(tmp_path: Path) -> None:
    # It fills only a dict of its own: the guard goes around the call.
    assert _found(tmp_path, "show_rate(epoch, 0.1)", "pass") == [("train.py", 13)]


def test_helpers_called_on_rank_zero_stay_clean(tmp_path: Path) -> None:
    assert _found(tmp_path, "if gpu == 0: half_learning_rate(optimizer, epoch, args)",
                  'if gpu == 0: save_checkpoint(model, "last.pt")') == []


# The script hands its worker function to a launcher helper of the project, which spawns a
# runner that calls it back (`fun(*fun_args)`): the worker runs on every rank.
CALLBACK_LAUNCHER = """\
    import random
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def run(proc_rank, world_size, port, fun, fun_args):
        dist.init_process_group("nccl", init_method=f"tcp://localhost:{port}", rank=proc_rank,
                                world_size=world_size)
        try:
            fun(*fun_args)
        finally:
            dist.destroy_process_group()


    def multi_proc_run(num_proc, fun, fun_args=()):
        port = random.randint(10001, 20002)
        mp.spawn(run, nprocs=num_proc, args=(num_proc, port, fun, fun_args))
"""

CALLBACK_MAIN = """\
    import torch
    from tqdm import tqdm
    from lib.distributed import multi_proc_run


    def single_proc_run(config):
        model = torch.nn.parallel.DistributedDataParallel(Net().cuda())
        model.eval()
        with torch.no_grad():
            for scan_id, observe in {loader}:
                sample = model(observe.cuda())
                torch.save(sample, f"out/{{scan_id[0]}}.pt")


    def main(config):
        if config.num_gpus > 1:
            multi_proc_run(config.num_gpus, fun=single_proc_run, fun_args=(config,))
        else:
            single_proc_run(config)


    if __name__ == "__main__":
        main(load_config())
"""


def _callback(tmp_path: Path, loader: str, select: str) -> list[tuple[str, int]]:
    files = {"lib/__init__.py": "", "lib/distributed.py": CALLBACK_LAUNCHER,
             "train.py": CALLBACK_MAIN.format(loader=loader)}
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, "train.py", "lib/distributed.py", select=select))


def test_worker_handed_to_a_launcher_helper_runs_on_every_rank(tmp_path: Path) -> None:
    loader = "tqdm(torch.utils.data.DataLoader(dataset, batch_size=1))"
    assert _callback(tmp_path, loader, "DDP020") == [("train.py", 10)]


def test_worker_handed_to_a_launcher_helper_with_a_quiet_bar_stays_clean(tmp_path: Path) -> None:
    loader = "tqdm(torch.utils.data.DataLoader(dataset, batch_size=1), disable=torch.distributed.get_rank() != 0)"
    assert _callback(tmp_path, loader, "DDP020") == []


def test_a_file_per_sample_of_the_rank_shard_is_not_a_shared_checkpoint(tmp_path: Path) -> None:
    # `f"out/{scan_id[0]}.pt"` names each file after the batch it came from: no DDP010.
    assert _callback(tmp_path, "torch.utils.data.DataLoader(dataset, batch_size=1)", "DDP010") == []


def test_a_fixed_file_saved_in_the_same_loop_is_still_reported(tmp_path: Path) -> None:
    files = {"lib/__init__.py": "", "lib/distributed.py": CALLBACK_LAUNCHER,
             "train.py": CALLBACK_MAIN.format(loader="torch.utils.data.DataLoader(dataset, batch_size=1)").replace(
                 'f"out/{scan_id[0]}.pt"', '"out/last.pt"')}
    found = lint_project(tmp_path, files, "train.py", "lib/distributed.py", select="DDP010")
    assert [(Path(f["path"]).name, f["location"]["line"]) for f in found] == [("train.py", 12)]


def test_a_checkpoint_named_after_the_step_counter_of_the_loader_loop_is_shared(tmp_path: Path) -> None:
    # `enumerate`'s counter numbers the steps, the same on every rank: each rank writes the same
    # `model{epoch}_{step}.bin`.
    source = """\
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 4))
        loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        for epoch in range(3):
            for step, batch in enumerate(loader):
                model(batch).sum().backward()
                if step % 100 == 0:
                    torch.save(model.module.state_dict(), os.path.join(out, f"model{epoch}_{step}.bin"))
    """
    assert lines(tmp_path, {"train.py": source}, "DDP010") == [14]
