"""Data loaders, samplers and evaluation as public training scripts write them, through
`ddpcheck lint`: each test writes a small project and checks the exact findings, with the
variant that is (or is not) reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


MONITOR = """\
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, DistributedSampler


    def monitor_loaders(bank_set, query_set):
        bank = DataLoader(bank_set, batch_size=64, sampler=DistributedSampler(bank_set, shuffle=True))
        query = DataLoader(query_set, batch_size=64, sampler=DistributedSampler(query_set, shuffle=True))
        return bank, query


    @torch.no_grad()
    def knn_accuracy(encoder, bank_loader, query_loader, k=20):
        encoder.eval()
        feats, labels = [], []
        for images, targets in bank_loader:
            feats.append(F.normalize(encoder(images.cuda()), dim=1))
            labels.append(targets.cuda())
        bank, bank_labels = torch.cat(feats), torch.cat(labels)
        hits = total = 0
        for images, targets in query_loader:
            sims = F.normalize(encoder(images.cuda()), dim=1) @ bank.T
            idx = sims.topk(k, dim=1).indices
            pred = bank_labels[idx].mode(dim=1).values
            hits += (pred == targets.cuda()).sum().item()
            total += targets.numel()
        encoder.train()
        return hits / max(total, 1)
"""

PRETRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from monitor import knn_accuracy, monitor_loaders


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(build_encoder().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
        train_set = ContrastiveImages(args.data)
        train_sampler = DistributedSampler(train_set)
        train_loader = DataLoader(train_set, batch_size=256, sampler=train_sampler, drop_last=True)
        bank_loader, query_loader = monitor_loaders(PlainImages(args.data, "train"), PlainImages(args.data, "val"))
        for epoch in range(args.epochs):
            train_sampler.set_epoch(epoch)
            for views, _ in train_loader:
                loss = model(views[0].cuda(), views[1].cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            acc = knn_accuracy(model.module.encoder, bank_loader, query_loader)
            if dist.get_rank() == 0:
                print(f"epoch {epoch}: knn {acc:.3f}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""


def test_a_shuffled_loader_read_only_by_a_no_grad_monitor_needs_no_set_epoch(tmp_path: Path) -> None:
    files = {"monitor.py": MONITOR, "pretrain.py": PRETRAIN}
    assert _lines(lint_project(tmp_path, files, "pretrain.py", "monitor.py", select="DDP002"), "DDP002") == []
    # Read with gradients on, both loaders count as training ones: their order repeats every epoch.
    graded = MONITOR.replace("    @torch.no_grad()\n", "")
    assert _lines(lint_project(tmp_path, {**files, "monitor.py": graded}, "pretrain.py", "monitor.py",
                               select="DDP002"), "DDP002") == [("pretrain.py", 20)] * 2


PROCESS_GROUP_CHECK = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def setup(local_rank):
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        probe = torch.ones(1).cuda()
        dist.all_reduce(probe)
        assert probe.item() == dist.get_world_size(), "process group is broken"


    def evaluate(model, loader):
        model.eval()
        correct = seen = 0
        with torch.no_grad():
            for images, labels in loader:
                pred = model(images.cuda()).argmax(1)
                correct += (pred == labels.cuda()).sum().item()
                seen += labels.numel()
        {reduce}
        return correct / seen


    def main(args):
        local_rank = int(os.environ["LOCAL_RANK"])
        setup(local_rank)
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        val_set = build_dataset(args.data, "val")
        val_loader = DataLoader(val_set, batch_size=128, sampler=DistributedSampler(val_set, shuffle=False))
        print(evaluate(model, val_loader))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""

SUMMED = """counts = torch.zeros(2, device="cuda")
        counts[0] = correct
        counts[1] = seen
        dist.all_reduce(counts)
        correct, seen = counts.tolist()"""


def test_an_all_reduce_that_only_probes_the_process_group_reduces_no_metric(tmp_path: Path) -> None:
    clean = PROCESS_GROUP_CHECK.replace("{reduce}", "pass")
    assert _lines(lint_project(tmp_path, {"train.py": clean}, "train.py", select="DDP018"), "DDP018") == []
    # Counters filled into a zero tensor and summed over ranks: the padded samples count twice.
    summed = PROCESS_GROUP_CHECK.replace("{reduce}", SUMMED)
    assert _lines(lint_project(tmp_path, {"train.py": summed}, "train.py", select="DDP018"), "DDP018") == \
        [("train.py", 37)]


ONE_EPOCH = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model, loader, optimizer):
            self.model, self.loader, self.optimizer = model, loader, optimizer

        def run_epoch(self):
            for x, y in self.loader:
                loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

        def train(self, max_epochs):
            for epoch in range(max_epochs):
                self.run_epoch()


    def main(total_epochs):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(16, 1).cuda(), device_ids=[local_rank])
        data = make_regression_set()
        loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data))
        Trainer(model, loader, torch.optim.Adam(model.parameters())).train(total_epochs)
        dist.destroy_process_group()


    if __name__ == "__main__":
        {epochs}
        main(total_epochs=epochs)
"""


def test_an_epoch_loop_that_runs_once_needs_no_set_epoch(tmp_path: Path) -> None:
    once = ONE_EPOCH.replace("{epochs}", "epochs = 1")
    assert _lines(lint_project(tmp_path, {"train.py": once}, "train.py", select="DDP002"), "DDP002") == []
    # Two epochs, or a count the user picks on the command line (its default of 1 is only a default).
    for epochs in ("epochs = 2",
                   'parser = argparse.ArgumentParser()\n        parser.add_argument("--epochs", type=int, default=1)\n'
                   "        epochs = parser.parse_args().epochs"):
        program = ONE_EPOCH.replace("{epochs}", epochs)
        assert _lines(lint_project(tmp_path, {"train.py": program}, "train.py", select="DDP002"), "DDP002") == \
            [("train.py", 21)]
