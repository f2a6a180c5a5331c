"""Messages on the way out of a loop (DDP020): a `print(...); return` out of the training loop
of a worker is printed once; a `break` out of the batch loop of a `train_epoch()` that a
caller's epoch loop runs comes again at each epoch. And the warning of a dataset builder
whose result the epoch loop keeps in a dict entry is reported where it is written (a guard
around the call would leave the other ranks without their data). Through `ddpcheck lint` on
small projects."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

WORKER = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(gpu_id, world_size, loader, epochs):
        dist.init_process_group("nccl", rank=gpu_id, world_size=world_size)
        model = DDP(torch.nn.Linear(4, 4).to(gpu_id), device_ids=[gpu_id])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for epoch in range(epochs):
            for step, (x, y) in enumerate(loader):
                loss = F.mse_loss(model(x.to(gpu_id)), y.to(gpu_id))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if loss.detach().item() == 0.0:
                    print("zero loss, stopping")
                    {leave}
        dist.destroy_process_group()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        mp.spawn(train, args=(n, None, 5), nprocs=n)
"""


def test_message_before_return_from_the_worker_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": WORKER.format(leave="return")}, "DDP020") == []


def test_message_without_leaving_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": WORKER.format(leave="pass")}, "DDP020") == [("train.py", 19)]


EPOCHS = """\
    import logging
    import sys
    import torch
    import torch.distributed as dist


    def train_one_epoch(model, data, optimizer, step, total_steps):
        for batch in data["train"]:
            if step >= total_steps:
                logging.warning(f"step {{step}} reached total_steps {{total_steps}}, ending")
                {leave}
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()
            step += 1
        return step


    def get_dataset(sources, epoch):
        if len(sources) > 1:
            logging.warning("mixing several sources during training")
        return torch.utils.data.DataLoader(sources[0], batch_size=4)


    def main():
        logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(sys.stdout)])
        dist.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sources = sys.argv[1:]
        data = {{}}
        step = 0
        for epoch in range(10):
            data["train"] = get_dataset(sources, epoch)
            step = train_one_epoch(model, data, optimizer, step, 1000)


    if __name__ == "__main__":
        main()
"""


def test_break_out_of_an_epoch_function_called_per_epoch_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": EPOCHS.format(leave="break")}, "DDP020") == [
        ("train.py", 10), ("train.py", 21)]


def test_raise_out_of_an_epoch_function_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": EPOCHS.format(leave="raise SystemExit(0)")}, "DDP020") == [
        ("train.py", 21)]
