"""A name rebound by an `if` without `else` before a loop that uses it (`if n_gpu > 1 and not
training: model = DataParallel(model)`, then `for batch in loader: model(batch)`): what the
caller handed in still reaches the loop where the test is false, and the `else` of a
conjunction says nothing about either of its parts. Through `ddpcheck lint` (DDP009) on an
evaluation helper in the style of Hugging Face's older example scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

SCRIPT = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def evaluate(args, model, dataset, eval_when_training=False):
        loader = DataLoader(dataset, batch_size=16)
        if {test}:
            model = torch.nn.DataParallel(model)
        model.eval()
        total = 0.0
        for x, y in loader:
            with torch.no_grad():
                total += torch.nn.functional.mse_loss(model(x.to(args.device)), y.to(args.device)).item()
        return total


    def train(args, model, dataset):
        if args.n_gpu > 1:
            model = torch.nn.DataParallel(model)
        if args.local_rank != -1:
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=16, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for step, (x, y) in enumerate(loader):
                loss = torch.nn.functional.mse_loss(model(x.to(args.device)), y.to(args.device))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if args.local_rank in [-1, 0] and step % 100 == 0:
                    evaluate(args, model, dataset, eval_when_training=True)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        args = parser.parse_args()
        torch.cuda.set_device(args.local_rank)
        args.device = torch.device("cuda", args.local_rank)
        dist.init_process_group(backend="nccl")
        args.n_gpu = 1
        dataset = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
        train(args, model.to(args.device), dataset)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_rank_zero_evaluation_through_a_helper_that_may_rewrap_is_reported(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT.format(test="args.n_gpu > 1 and eval_when_training is False")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 37)]


def test_a_helper_that_unwraps_what_it_is_handed_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT.format(test="isinstance(model, torch.nn.parallel.DistributedDataParallel)")
             .replace("model = torch.nn.DataParallel(model)\n        model.eval()", "model = model.module\n        model.eval()")}
    assert "model = model.module" in files["train.py"]
    assert lines(tmp_path, files, "DDP009") == []
