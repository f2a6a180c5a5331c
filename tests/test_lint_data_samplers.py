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
    # Read with gradients on by a function that never back-propagates, they still only measure.
    graded = MONITOR.replace("    @torch.no_grad()\n", "")
    assert _lines(lint_project(tmp_path, {**files, "monitor.py": graded}, "pretrain.py", "monitor.py",
                               select="DDP002"), "DDP002") == []
    # A monitor that trains a probe on them reads them for training: their order repeats every epoch.
    graded = graded.replace("            labels.append(targets.cuda())\n",
                            "            labels.append(targets.cuda())\n"
                            "            encoder(images.cuda()).pow(2).mean().backward()\n")
    assert "backward" in graded
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


MONAI_PRETRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from monai.data import CacheDataset, DataLoader, DistributedSampler
    from torch.nn.parallel import DistributedDataParallel


    def get_loader(args, files, transforms):
        train_ds = CacheDataset(data=files, transform=transforms, cache_rate=0.5)
        sampler = DistributedSampler(dataset=train_ds, even_divisible=True{shuffle})
        return DataLoader(train_ds, batch_size=args.batch_size, num_workers=4, sampler=sampler)


    def main(args):
        dist.init_process_group("nccl", init_method="env://")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DistributedDataParallel(build_net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        train_loader = get_loader(args, list_files(args.root), pretrain_transforms())
        step = 0
        while step < args.num_steps:
            {set_epoch}for batch in train_loader:
                loss = model(batch["image"].cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""


def test_monai_loaders_and_samplers_are_torch_ones(tmp_path: Path) -> None:
    program = MONAI_PRETRAIN.replace("{shuffle}", "").replace("{set_epoch}", "")
    assert _lines(lint_project(tmp_path, {"pretrain.py": program}, "pretrain.py", select="DDP001,DDP002"),
                  "DDP002") == [("pretrain.py", 22)]
    assert _lines(lint_project(tmp_path, {"pretrain.py": program}, "pretrain.py", select="DDP001"), "DDP001") == []
    # set_epoch on each pass, or no shuffle: nothing to report.
    for shuffle, set_epoch in (("", "train_loader.sampler.set_epoch(step)\n            "), (", shuffle=False", "")):
        clean = MONAI_PRETRAIN.replace("{shuffle}", shuffle).replace("{set_epoch}", set_epoch)
        assert _lines(lint_project(tmp_path, {"pretrain.py": clean}, "pretrain.py", select="DDP002"), "DDP002") == []


SHARD_SAMPLER = """\
    import math
    import torch
    import torch.distributed as dist


    class ShardSampler(torch.utils.data.Sampler):
        def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True):
            self.dataset = dataset
            self.num_replicas = num_replicas or dist.get_world_size()
            self.rank = dist.get_rank() if rank is None else rank
            self.shuffle = shuffle
            self.epoch = 0
            self.num_samples = math.ceil(len(dataset) / self.num_replicas)
            self.total_size = self.num_samples * self.num_replicas

        def __iter__(self):
            if self.shuffle:
                g = torch.Generator()
                g.manual_seed(self.epoch)
                order = torch.randperm(len(self.dataset), generator=g).tolist()
            else:
                order = list(range(len(self.dataset)))
            order += order[: self.total_size - len(order)]
            return iter(order[self.rank:self.total_size:self.num_replicas])

        def __len__(self):
            return self.num_samples

        def set_epoch(self, epoch):
            self.epoch = epoch
"""

SHARD_TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    from samplers import ShardSampler


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(build_net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_set = build_set(args.root)
        sampler = ShardSampler(train_set{shuffle})
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        for epoch in range(args.epochs):
            {set_epoch}for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""


def test_a_project_sampler_that_draws_its_order_from_the_epoch_needs_set_epoch(tmp_path: Path) -> None:
    files = {"samplers.py": SHARD_SAMPLER}
    program = SHARD_TRAIN.replace("{shuffle}", "").replace("{set_epoch}", "")
    assert _lines(lint_project(tmp_path, {**files, "train.py": program}, "train.py", "samplers.py",
                               select="DDP002"), "DDP002") == [("train.py", 19)]
    for shuffle, set_epoch in (("", "sampler.set_epoch(epoch)\n            "), (", shuffle=False", "")):
        clean = SHARD_TRAIN.replace("{shuffle}", shuffle).replace("{set_epoch}", set_epoch)
        assert _lines(lint_project(tmp_path, {**files, "train.py": clean}, "train.py", "samplers.py",
                                   select="DDP002"), "DDP002") == []


MONAI_VALIDATION = """\
    import torch
    import torch.distributed as dist
    from monai.data import DataLoader, DistributedSampler


    def validate(model, val_ds):
        val_loader = DataLoader(val_ds, batch_size=1, sampler=DistributedSampler(val_ds, shuffle=False{even}))
        dice_sum = torch.zeros(2, device="cuda")
        with torch.no_grad():
            for batch in val_loader:
                dice_sum[0] += dice(model(batch["image"].cuda()), batch["label"].cuda())
                dice_sum[1] += 1
        dist.all_reduce(dice_sum)
        return (dice_sum[0] / dice_sum[1]).item()
"""


def test_monais_sampler_pads_unless_even_divisible_is_false(tmp_path: Path) -> None:
    padded = MONAI_VALIDATION.replace("{even}", "")
    assert _lines(lint_project(tmp_path, {"evaluate.py": padded}, "evaluate.py", select="DDP018"), "DDP018") == \
        [("evaluate.py", 7)]
    exact = MONAI_VALIDATION.replace("{even}", ", even_divisible=False")
    assert _lines(lint_project(tmp_path, {"evaluate.py": exact}, "evaluate.py", select="DDP018"), "DDP018") == []


ENGINE = """\
    import torch
    import torch.distributed as dist


    def run_epoch(loader, model, optimizer):
        model.train()
        for batch in loader:
            loss = model(batch).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    @torch.no_grad()
    def evaluate(loader, model):
        model.eval()
        total_error = 0.0
        for batch in loader:
            total_error += (model(batch) - batch.y).abs().sum().item()
        {reduce}
        return total_error / len(loader.dataset)


    def fit(model, optimizer, train_loader, val_loader, epochs, writer):
        for epoch in range(epochs):
            train_loader.sampler.set_epoch(epoch)
            run_epoch(train_loader, model, optimizer)
            val_mae = evaluate(val_loader, model)
            writer.add_scalar("val/mae", val_mae, epoch)
"""

GRAPH_TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler
    from torch.utils.tensorboard import SummaryWriter
    from torch_geometric.loader import DataLoader

    from engine import fit


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(build_gnn(args).cuda(), device_ids=[local_rank])
        train_set, val_set = split_molecules(args.root)
        train_loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))
        fit(model, torch.optim.Adam(model.parameters()), train_loader, val_loader, args.epochs, SummaryWriter())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""


def test_a_shard_metric_in_a_project_module_is_followed_there(tmp_path: Path) -> None:
    program = {"train.py": GRAPH_TRAIN, "engine.py": ENGINE.replace("{reduce}", "")}
    assert _lines(lint_project(tmp_path, program, "train.py", "engine.py", select="DDP036"), "DDP036") == \
        [("engine.py", 29)]
    reduced = ENGINE.replace("{reduce}", "total_error = torch.tensor(total_error).cuda()\n"
                                         "        dist.all_reduce(total_error)\n        total_error = total_error.item()")
    assert _lines(lint_project(tmp_path, {**program, "engine.py": reduced}, "train.py", "engine.py",
                               select="DDP036"), "DDP036") == []


STALE_TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model, dataset, epochs):
            self.epoch = 0
            self.epochs = epochs
            self.model = model
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            self.train_data = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))

        def resume(self, path):
            ckpt = torch.load(path, map_location="cpu")
            self.model.module.load_state_dict(ckpt["model"])
            self.epoch = ckpt["epoch"] + 1

        def _run_epoch(self, e):
            self.train_data.sampler.set_epoch({epoch})
            for x, y in self.train_data:
                loss = torch.nn.functional.cross_entropy(self.model(x.cuda()), y.cuda())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

        def train(self):
            for e in range(self.epoch, self.epochs):
                self._run_epoch(e){advance}


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        trainer = Trainer(DDP(make_model().cuda(), device_ids=[local_rank]), make_dataset(), 50)
        if os.path.exists("last.pt"):
            trainer.resume("last.pt")
        trainer.train()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_set_epoch_with_an_epoch_attribute_that_never_advances(tmp_path: Path) -> None:
    stale = STALE_TRAINER.replace("{epoch}", "self.epoch").replace("{advance}", "")
    findings = lint_project(tmp_path, {"train.py": stale}, "train.py", select="DDP002")
    assert _lines(findings, "DDP002") == [("train.py", 22)]
    assert "self.epoch" in findings[0]["message"]
    # The loop's counter, or an attribute the loop advances: the order changes every epoch.
    for epoch, advance in (("e", ""), ("self.epoch", "\n                self.epoch = e + 1")):
        clean = STALE_TRAINER.replace("{epoch}", epoch).replace("{advance}", advance)
        assert _lines(lint_project(tmp_path, {"train.py": clean}, "train.py", select="DDP002"), "DDP002") == []
