"""Model-level mechanisms seen on public scripts of batch 26 (find_unused_parameters, checkpoint
saves, BatchNorm, state-dict prefixes): each through `ddpcheck lint` on a small project written
in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A small classifier whose forward returns a tuple and, given labels, adds a loss built in the
# `if`: the loss is computed from the output of every layer, so no parameter goes without a
# gradient.
NET = """\
    import torch.nn as nn
    import torch.nn.functional as F


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 6, 5)
            self.pool = nn.MaxPool2d(2)
            self.fc1 = nn.Linear(6 * 12 * 12, 64)
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x, labels=None):
            x = self.pool(F.relu(self.conv(x)))
            x = x.view(-1, 6 * 12 * 12)
            x = self.fc2(F.relu(self.fc1(x)))
            x = (x,)
            if labels is not None:
                {loss}
                x = (loss,) + x
            return x
"""

NET_SCRIPT = """\
    import os
    import torch
    import torch.nn as nn
    from torch.utils.data.distributed import DistributedSampler
    from model import Net

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group(backend="nccl")
    model = Net().cuda()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)))
    sampler = DistributedSampler(dataset)
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=8)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank], find_unused_parameters=True)
    for epoch in range(5):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            outputs = model(inputs.cuda())[0]
            loss = criterion(outputs, targets.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_find_unused_parameters_with_a_loss_built_under_labels_is_reported(tmp_path: Path) -> None:
    files = {"model.py": NET.format(loss="loss_fct = nn.CrossEntropyLoss()\n"
                                         "                loss = loss_fct(x[0], labels)"),
             "train.py": NET_SCRIPT}
    assert lines(tmp_path, files, "DDP027") == [("train.py", 16)]


def test_find_unused_parameters_with_a_layer_used_only_under_labels_is_clean(tmp_path: Path) -> None:
    # The arm calls a layer of the model: without labels its parameters get no gradient.
    files = {"model.py": NET.format(loss="loss = self.fc2(x[0]).sum()"),
             "train.py": NET_SCRIPT}
    assert lines(tmp_path, files, "DDP027") == []


def test_find_unused_parameters_with_a_project_loss_under_labels_is_clean(tmp_path: Path) -> None:
    # A loss function of the project: what it reaches is not read here.
    files = {"model.py": NET.format(loss="loss_fct = make_loss()\n"
                                         "                loss = loss_fct(x[0], labels)"),
             "train.py": NET_SCRIPT}
    assert lines(tmp_path, files, "DDP027") == []
