"""What `torch.load` reads is data when it is handed to one of torch's own datasets: the indices
of `Subset(train_set, torch.load(path))`, the tensors of a `TensorDataset`. Through `ddpcheck
lint` on a small trainer in the style of image-classification scripts; a checkpoint loaded
beside it stays reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

SCRIPT = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, Subset
    from torchvision import datasets, transforms


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--subset-idx", type=str, default=None)
        parser.add_argument("--resume", type=str, default=None)
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        train_set = datasets.CIFAR10("data", train=True, transform=transforms.ToTensor())
        if args.subset_idx is not None:
            subset_idx = torch.load(args.subset_idx)
            train_set = Subset(train_set, subset_idx)
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=128, sampler=sampler)
        model = DDP(torch.nn.Linear(3072, 10).cuda(), device_ids=[local_rank])
        if args.resume is not None:
            state = torch.load(args.resume)
            model.module.load_state_dict(state)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda().flatten(1)), y.cuda()).backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_indices_handed_to_a_subset_are_data_not_a_checkpoint(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SCRIPT}, "DDP011") == [("train.py", 27)]


def test_tensors_handed_to_a_tensor_dataset_are_data(tmp_path: Path) -> None:
    tensors = SCRIPT.replace("from torch.utils.data import DataLoader, DistributedSampler, Subset",
                             "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset").replace(
        "            train_set = Subset(train_set, subset_idx)",
        "            train_set = TensorDataset(subset_idx)")
    assert lines(tmp_path, {"train.py": tensors}, "DDP011") == [("train.py", 27)]


def test_the_same_load_handed_to_a_model_stays_reported(tmp_path: Path) -> None:
    weights = SCRIPT.replace("            train_set = Subset(train_set, subset_idx)",
                             "            train_set = Subset(train_set, range(1000))\n"
                             "            torch.nn.Linear(3072, 10).load_state_dict(subset_idx)")
    assert lines(tmp_path, {"train.py": weights}, "DDP011") == [("train.py", 21), ("train.py", 28)]
