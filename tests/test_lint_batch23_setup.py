"""The model's reading of how a script sets itself up, on mechanisms seen on public scripts of
batch 23: a DataParallel/DDP `if`/`elif` on a per-process GPU count (DDP013), a global rank
shifted by a constant or composed from the node's number and LOCAL_RANK read in place (DDP007),
and a learning rate written by a set-up helper on an `args` object imported from another module
of the project (DDP004). Each through `ddpcheck lint` on a small project written in the style of
such scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    """(file name, line) of each finding of `select` when `target` is linted."""
    return sorted((Path(f["path"]).name, f["location"]["line"])
                  for f in lint_project(tmp_path, files, target, select=select))


# --- DDP013: DataParallel when a process sees several GPUs, else DDP under the launcher --------
HF_TEMPLATE = """\
    import os
    import torch
    from torch.nn import DataParallel
    from torch.nn.parallel import DistributedDataParallel


    def train(args, model, loader):
        {keep}
        model = model.to(args.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        if args.n_gpu > 1:
            model = DataParallel(model)
        elif args.local_rank != -1:
            model = DistributedDataParallel(model, device_ids=[args.local_rank], output_device=args.local_rank)
        for epoch in range(int(args.num_train_epochs)):
            for step, (x, y) in enumerate(loader):
                model.train()
                outputs = {forward}(x)
                loss = torch.nn.functional.mse_loss(outputs, y)
                loss.backward()
                optimizer.step()
                model.zero_grad()


    def main(args, model, loader):
        args.local_rank = int(os.environ.get("LOCAL_RANK", "-1"))
        if args.local_rank == -1:
            args.n_gpu = torch.cuda.device_count()
            args.device = torch.device("cuda")
        else:
            torch.cuda.set_device(args.local_rank)
            args.device = torch.device("cuda", args.local_rank)
            torch.distributed.init_process_group(backend="nccl")
            args.n_gpu = 1
        train(args, model, loader)
"""


def test_forward_through_a_ddp_wrap_in_the_elif_of_a_gpu_count_test_is_clean(tmp_path: Path) -> None:
    # `args.n_gpu > 1` counts one process's GPUs (DataParallel), not the ranks: the DDP made in
    # the `elif` is what `model` holds under the launcher.
    files = {"train.py": HF_TEMPLATE.format(keep="pass", forward="model")}
    assert lines(tmp_path, files, "DDP013") == []


def test_inner_module_trained_beside_that_wrap_is_reported(tmp_path: Path) -> None:
    files = {"train.py": HF_TEMPLATE.format(keep="net = model.to(args.device)", forward="net")}
    assert lines(tmp_path, files, "DDP013") == [("train.py", 18)]
