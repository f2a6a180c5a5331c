"""Output that is not repeated per step, and the process index `mp.spawn` hands its worker,
through `ddpcheck lint`: a download message printed while a missing file is fetched (once), and a
`verbose = (worker_idx == 0)` flag that guards the rank-0 output and checkpoint."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

EVAL_WITH_DOWNLOAD = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hellaswag import iterate_examples


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4 * dist.get_world_size())
        for step in range(1000):
            optimizer.zero_grad()
            model(torch.randn(4, 8).cuda()).sum().backward()
            optimizer.step()
            if step % 250 == 0:
                for i, example in enumerate(iterate_examples("val")):
                    if i % dist.get_world_size() != rank:
                        continue
                    with torch.no_grad():
                        model(example.cuda())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

HELLASWAG = """\
    import json
    import os

    DATA_CACHE_DIR = "hellaswag"


    def download(split):
        os.makedirs(DATA_CACHE_DIR, exist_ok=True)
        data_filename = os.path.join(DATA_CACHE_DIR, f"hellaswag_{split}.jsonl")
        if GUARD:
            print(f"Downloading {split} to {data_filename}...")


    def iterate_examples(split):
        download(split)
        with open(os.path.join(DATA_CACHE_DIR, f"hellaswag_{split}.jsonl")) as f:
            for line in f:
                yield json.loads(line)
    """


def _download(tmp_path: Path, guard: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": EVAL_WITH_DOWNLOAD, "hellaswag.py": HELLASWAG.replace("GUARD", guard)})
    return finding_set(tmp_path, "train.py", select="DDP020")


def test_a_message_printed_while_a_missing_file_is_downloaded_is_not_repeated_output(tmp_path: Path) -> None:
    assert _download(tmp_path, "not os.path.exists(data_filename)") == set()


def test_a_message_printed_each_time_the_examples_are_read_is_reported(tmp_path: Path) -> None:
    assert _download(tmp_path, "split") == {("train.py", 22, "DDP020")}


SPAWNED = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main_worker(worker_idx, world_size, model_dir):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500", rank=worker_idx, world_size=world_size)
        torch.cuda.set_device(worker_idx)
        verbose = (FLAG == 0)
        model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[worker_idx])
        for ep in range(10):
            model(torch.randn(4, 8).cuda()).sum().backward()
            if verbose:
                print("[EPOCH]", ep)
                torch.save(model.module.state_dict(), model_dir)
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(main_worker, nprocs=2, args=(2, "model.pt"))
    """


def _spawned(tmp_path: Path, flag: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": SPAWNED.replace("FLAG", flag)})
    return finding_set(tmp_path, "train.py", select="DDP010,DDP020")


def test_a_flag_made_from_the_spawn_index_guards_the_rank_zero_work(tmp_path: Path) -> None:
    assert _spawned(tmp_path, "worker_idx") == set()


def test_a_flag_made_from_another_parameter_guards_nothing(tmp_path: Path) -> None:
    assert _spawned(tmp_path, "world_size % 2") == {("train.py", 15, "DDP020"), ("train.py", 16, "DDP010")}
