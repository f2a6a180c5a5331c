"""Console output repeated on every rank (DDP020) where the script hands things on, through
`ddpcheck lint`: a progress bar whose `disable=` follows an on/off switch that a project module's
parser declares (the same on every rank), and an evaluation function handed the rank for other
uses whose own lines never name it. The clean variants stay clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

OPTIONS = """\
    import argparse


    def get_args():
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=100)
        parser.add_argument("--hide_progress", action="store_true")
        return parser.parse_args()
    """

PRETRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from tqdm import tqdm

    from options import get_args


    def main():
        args = get_args()
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dataset = build_dataset()
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=128, sampler=sampler, num_workers=8)
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            progress = tqdm(loader, desc=f"epoch {{epoch}}", disable={disable})
            for (x1, x2), _ in progress:
                loss = model(x1.cuda(), x2.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                progress.set_postfix({{"loss": loss.item()}})
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_bar_disabled_by_a_switch_of_a_project_parser_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"options.py": OPTIONS, "pretrain.py": PRETRAIN.format(disable="args.hide_progress")})
    assert finding_set(tmp_path, "pretrain.py", select="DDP020") == {("pretrain.py", 24, "DDP020")}


def test_bar_disabled_off_rank_zero_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"options.py": OPTIONS,
                             "pretrain.py": PRETRAIN.format(disable="args.hide_progress or local_rank != 0")})
    assert finding_set(tmp_path, "pretrain.py", select="DDP020") == set()


def test_switch_the_script_changes_per_rank_clean(tmp_path: Path) -> None:
    # The script sets the field itself (here from the rank): no longer the command line's value.
    changed = PRETRAIN.format(disable="args.hide_progress").replace(
        "        torch.cuda.set_device(local_rank)\n",
        "        torch.cuda.set_device(local_rank)\n"
        "        args.hide_progress = args.hide_progress or local_rank != 0\n")
    write_project(tmp_path, {"options.py": OPTIONS, "pretrain.py": changed})
    assert finding_set(tmp_path, "pretrain.py", select="DDP020") == set()


# The evaluation runs through a library decoding call the linter cannot follow, and is handed the
# rank to pick the device and to decide who logs to the tracker.
ASR = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    import whisper


    def evaluate(rank, local_rank, model, eval_loaders, step):
        inner = model.module
        inner.eval()
        for name, loader in eval_loaders:
            print({message})
            with torch.no_grad():
                for audio, text in loader:
                    results = whisper.decode(inner, audio.to(local_rank))
            if rank == 0:
                log_results(name, results, step)


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        train_set = build_dataset("train")
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=16, sampler=sampler)
        eval_loaders = [("clean", build_loader("clean")), ("other", build_loader("other"))]
        model = DDP(build_model().to(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step = 0
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for audio, text in loader:
                loss = model(audio.to(local_rank), text.to(local_rank))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step % 1000 == 0:
                    evaluate(rank=rank, local_rank=local_rank, model=model, eval_loaders=eval_loaders, step=step)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_worker_handed_the_rank_for_other_uses_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": ASR.format(message='f"Evaluating {name}"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 43, "DDP020")}


def test_worker_whose_line_names_the_rank_clean(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": ASR.format(message='f"[rank {rank}] evaluating {name}"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_worker_whose_message_is_built_from_the_rank_clean(tmp_path: Path) -> None:
    built = ASR.format(message="header").replace(
        "        for name, loader in eval_loaders:\n",
        "        for name, loader in eval_loaders:\n"
        "            header = f\"GPU {rank}: {name}\"\n")
    write_project(tmp_path, {"train.py": built})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()
