"""A data module whose loader builder picks every world-size-th index from the rank's own
(`np.arange(rank, n, world_size)`) and returns the loader to the training script, through
`ddpcheck lint` (DDP034): the shares differ by one when the set does not divide evenly."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

DATA = """\
    import numpy as np
    import torch.distributed as dist
    from torch.utils.data import DataLoader, SubsetRandomSampler
    from torchvision import datasets, transforms


    def build_loader(root, batch_size, train=True):
        dataset = datasets.CIFAR10(root, train=train, transform=transforms.ToTensor(), download=True)
        rank = dist.get_rank()
        world = dist.get_world_size()
        indices = np.arange(rank, len(dataset), world)
        sampler = SubsetRandomSampler(indices)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=4, drop_last=True)
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from data import build_loader


    def run_epoch(model, loader, optimizer, device):
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def main(args):
        dist.init_process_group("nccl")
        device = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(device)
        model = DDP(build_model().cuda(), device_ids=[device])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader = build_loader(args.data, 64)
        for epoch in range(args.epochs):
            run_epoch(model, train_loader, optimizer, device)
        dist.destroy_process_group()
    """


def test_strided_indices_of_a_returned_training_loader_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": TRAIN, "data.py": DATA})
    assert finding_set(tmp_path, "train.py", select="DDP034") == {("data.py", 11, "DDP034")}


def test_torch_arange_in_a_builder_reported(tmp_path: Path) -> None:
    data = DATA.replace("np.arange(", "torch.arange(").replace("import numpy as np\n", "import torch\n")
    write_project(tmp_path, {"train.py": TRAIN, "data.py": data})
    assert finding_set(tmp_path, "train.py", select="DDP034") == {("data.py", 11, "DDP034")}


def test_builder_that_truncates_to_a_multiple_clean(tmp_path: Path) -> None:
    data = DATA.replace(
        "        indices = np.arange(rank, len(dataset), world)\n",
        "        usable = len(dataset) // world * world\n"
        "        indices = np.arange(rank, len(dataset), world)[: usable // world]\n")
    write_project(tmp_path, {"train.py": TRAIN, "data.py": data})
    assert finding_set(tmp_path, "train.py", select="DDP034") == set()


def test_loader_only_evaluated_without_collectives_clean(tmp_path: Path) -> None:
    scored = TRAIN.replace("            run_epoch(model, train_loader, optimizer, device)\n",
                           "            score(model, train_loader, device)\n") + (
        "\n\ndef score(model, loader, device):\n"
        "    correct = 0\n"
        "    with torch.no_grad():\n"
        "        for images, labels in loader:\n"
        "            correct += (model(images.to(device)).argmax(1) == labels.to(device)).sum().item()\n"
        "    return correct\n")
    write_project(tmp_path, {"train.py": scored, "data.py": DATA})
    assert finding_set(tmp_path, "train.py", select="DDP034") == set()
