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


# A launcher in scripts/ that puts the project root on sys.path through `os.pardir`, and a
# trainer class in utils/ that evaluates on a DistributedSampler shard and hands the figures,
# packed in lists beside the training ones, to a helper that writes them to the log on rank 0.
RUN = """\
    import os, sys
    import torch
    from torch.distributed import init_process_group, destroy_process_group
    CUR_DIR = os.path.dirname(__file__)
    ROOT_DIR = os.path.abspath(os.path.join(CUR_DIR, os.pardir))
    sys.path.extend([ROOT_DIR, CUR_DIR])

    from utils.trainer import Trainer, make_loaders


    def main():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        init_process_group(backend="nccl")
        train_loader, val_loader = make_loaders()
        trainer = Trainer(torch.nn.Linear(8, 2))
        trainer.fit(train_loader, val_loader)
        destroy_process_group()


    if __name__ == "__main__":
        main()
"""

TRAINER = """\
    import os
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler


    def make_loaders():
        data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        train_loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
        val_loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
        return train_loader, val_loader


    class Trainer:
        def __init__(self, model):
            self.gpu_id = int(os.environ["LOCAL_RANK"])
            self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

        def train(self, loader):
            total = 0.0
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                total += loss.item()
            return total / len(loader)

        @torch.no_grad()
        def evaluate(self, loader):
            total = 0.0
            correct = 0
            for x, y in loader:
                out = self.model(x)
                total += torch.nn.functional.cross_entropy(out, y).item()
                correct += (out.argmax(1) == y).sum().item()
            {reduce}
            return total / len(loader), correct / len(loader.dataset)

        def _write_log(self, epoch, train_loss, val_loss, val_acc):
            print(f"epoch {{epoch}} train loss {{train_loss}}")
            print(f"epoch {{epoch}} val loss {{val_loss}} acc {{val_acc}}")

        def save_and_log(self, epoch, losses, val_acc):
            if self.gpu_id == 0:
                torch.save(self.model.module.state_dict(), "last.pt")
                self._write_log(epoch, train_loss=losses[0], val_loss=losses[1], val_acc=val_acc)

        def fit(self, train_loader, val_loader):
            for epoch in range(10):
                train_loader.sampler.set_epoch(epoch)
                train_loss = self.train(train_loader)
                val_loss, val_acc = self.evaluate(val_loader)
                self.save_and_log(epoch, losses=[train_loss, val_loss], val_acc=val_acc)
"""


def test_metrics_handed_in_lists_to_a_logging_helper_are_reported_where_it_logs(tmp_path: Path) -> None:
    files = {"scripts/run.py": RUN, "utils/__init__.py": "", "utils/trainer.py": TRAINER.format(reduce="pass")}
    assert lines(tmp_path, files, "DDP036", target="scripts/run.py") == [("trainer.py", 44)]


def test_metrics_reduced_before_they_are_returned_are_clean(tmp_path: Path) -> None:
    reduce = ("stats = torch.tensor([total, correct])\n"
              "            torch.distributed.all_reduce(stats)\n"
              "            total, correct = stats.tolist()")
    files = {"scripts/run.py": RUN, "utils/__init__.py": "", "utils/trainer.py": TRAINER.format(reduce=reduce)}
    assert lines(tmp_path, files, "DDP036", target="scripts/run.py") == []


def test_training_loss_handed_in_the_same_list_is_clean(tmp_path: Path) -> None:
    # Only the training loss is written: it is one rank's by design, not an evaluation metric.
    trainer = TRAINER.format(reduce="pass").replace(
        'print(f"epoch {epoch} val loss {val_loss} acc {val_acc}")', "pass")
    files = {"scripts/run.py": RUN, "utils/__init__.py": "", "utils/trainer.py": trainer}
    assert lines(tmp_path, files, "DDP036", target="scripts/run.py") == []


def test_project_root_put_on_sys_path_through_os_pardir_is_followed(tmp_path: Path) -> None:
    # The trainer's module is found through `os.path.join(CUR_DIR, os.pardir)`: its checkpoint,
    # saved by every rank, is reported.
    trainer = TRAINER.format(reduce="pass").replace("            if self.gpu_id == 0:\n", "            if True:\n")
    files = {"scripts/run.py": RUN, "utils/__init__.py": "", "utils/trainer.py": trainer}
    assert lines(tmp_path, files, "DDP010", target="scripts/run.py") == [("trainer.py", 48)]


# Networks chosen by name through a table of factory functions (`func_dict[name](...)`), or a
# function that returns the table's entry (`get_func_by_name(name)(...)`).
NETS = """\
    import torch.nn as nn


    def conv_bn(cin, cout):
        result = nn.Sequential()
        result.add_module("conv", nn.Conv2d(cin, cout, 3, padding=1, bias=False))
        result.add_module("{norm_name}", {norm}(cout))
        return result


    class PlainNet(nn.Module):
        def __init__(self, widths, num_classes=1000):
            super().__init__()
            self.stages = nn.Sequential(*[conv_bn(a, b) for a, b in zip([3] + widths[:-1], widths)])
            self.linear = nn.Linear(widths[-1], num_classes)

        def forward(self, x):
            x = self.stages(x)
            return self.linear(x.mean((2, 3)))


    def create_plain_a(deploy=False):
        return PlainNet([32, 64, 128])


    def create_plain_b(deploy=False):
        return PlainNet([64, 128, 256])


    func_dict = {{"plain-a": create_plain_a, "plain-b": create_plain_b}}


    def get_func_by_name(name):
        return func_dict[name]


    def create_by_name(name, deploy=False):
        {create}
"""

NETS_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from nets import create_by_name

    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="plain-a")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = create_by_name(args.arch).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        loss = model(torch.randn(8, 3, 32, 32).cuda()).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_batchnorm_network_built_through_a_function_returning_the_factory_is_reported(tmp_path: Path) -> None:
    files = {"nets.py": NETS.format(norm_name="bn", norm="nn.BatchNorm2d",
                                    create="return get_func_by_name(name)(deploy=deploy)"),
             "train.py": NETS_SCRIPT}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 14)]


def test_groupnorm_network_built_through_a_function_returning_the_factory_is_clean(tmp_path: Path) -> None:
    files = {"nets.py": NETS.format(norm_name="gn", norm="(lambda c: nn.GroupNorm(8, c))",
                                    create="return get_func_by_name(name)(deploy=deploy)"),
             "train.py": NETS_SCRIPT}
    assert lines(tmp_path, files, "DDP012") == []


def test_factory_table_with_a_network_without_batchnorm_is_clean(tmp_path: Path) -> None:
    # `--arch mlp` picks a network with no BatchNorm: which one runs is unknown.
    nets = NETS.format(norm_name="bn", norm="nn.BatchNorm2d",
                       create="return get_func_by_name(name)(deploy=deploy)")
    nets = nets.replace('"plain-b": create_plain_b}', '"plain-b": create_plain_b, "mlp": create_mlp}')
    nets = nets.replace("    func_dict = ", "    def create_mlp(deploy=False):\n"
                                            "        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))\n\n\n"
                                            "    func_dict = ")
    files = {"nets.py": nets, "train.py": NETS_SCRIPT}
    assert lines(tmp_path, files, "DDP012") == []
