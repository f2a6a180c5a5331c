"""Padding evaluation samplers made where real projects make them, through `ddpcheck lint`: in a
data factory of another module that serves every split, and metrics reduced by a method that
gathers and sums."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

FACTORY = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from series.windows import WindowDataset


    def data_provider(args, flag):
        shuffle_flag = flag == "train"
        data_set = WindowDataset(args.root, flag=flag, seq_len=args.seq_len)
        {guard}sampler_for_train = DistributedSampler(data_set, shuffle=shuffle_flag)
        {indent}loader = DataLoader(data_set, batch_size=args.batch_size, sampler=sampler_for_train)
        {indent}return data_set, loader
        return data_set, DataLoader(data_set, batch_size=args.batch_size)
    """

WINDOWS = """\
    import torch


    class WindowDataset(torch.utils.data.Dataset):
        def __init__(self, root, flag, seq_len):
            self.data = torch.load(f"{root}/{flag}.pt")
            self.seq_len = seq_len

        def __len__(self):
            return len(self.data) - self.seq_len

        def __getitem__(self, i):
            return self.data[i:i + self.seq_len], self.data[i + self.seq_len]
    """

EXPERIMENT = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from series.factory import data_provider


    class Forecaster:
        def __init__(self, args):
            self.args = args
            self.model = DDP(torch.nn.Linear(args.seq_len, 1).cuda(), device_ids=[args.local_rank])

        def _get_data(self, flag):
            return data_provider(self.args, flag)

        def vali(self):
            vali_data, vali_loader = self._get_data(flag="val")
            total, count = torch.zeros(1).cuda(), torch.zeros(1).cuda()
            with torch.no_grad():
                for x, y in vali_loader:
                    total += torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda()) * len(x)
                    count += len(x)
            dist.all_reduce(total)
            dist.all_reduce(count)
            return (total / count).item()

        def train(self):
            train_data, train_loader = self._get_data(flag="train")
            opt = torch.optim.Adam(self.model.parameters(), lr=self.args.lr)
            for epoch in range(self.args.epochs):
                train_loader.sampler.set_epoch(epoch)
                for x, y in train_loader:
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda()).backward()
                    opt.step()
                print(self.vali())


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--root", default="data")
        parser.add_argument("--seq_len", type=int, default=96)
        parser.add_argument("--batch_size", type=int, default=32)
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--lr", type=float, default=1e-4)
        args = parser.parse_args()
        args.local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl")
        Forecaster(args).train()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _forecast_project(tmp_path, guard: str = "", indent: str = "") -> None:
    _write(tmp_path, {"series/__init__.py": "", "series/windows.py": WINDOWS,
                      "series/factory.py": FACTORY.format(guard=guard, indent=indent),
                      "run.py": EXPERIMENT})


def test_a_factory_sampler_named_for_training_that_serves_validation_is_reported(tmp_path):
    _forecast_project(tmp_path)
    assert _findings(tmp_path, "run.py", select="DDP018") == {("factory.py", 10, "DDP018")}


def test_a_factory_that_makes_the_sampler_for_the_training_split_only_is_clean(tmp_path):
    _forecast_project(tmp_path, guard='if flag == "train":\n        ', indent="    ")
    assert _findings(tmp_path, "run.py", select="DDP018") == set()


RECOMMENDER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model, device):
            self.model = DDP(model.to(device), device_ids=[device])
            self.device = device

        def gather_{kind}(self, value, n):
            parts = [torch.zeros_like(value) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, value)
            merged = torch.cat(parts)
            return {result}

        @torch.no_grad()
        def evaluate(self, loader):
            hits = torch.zeros(1, device=self.device)
            for users, items in loader:
                hits += (self.model(users.to(self.device)).argmax(1) == items.to(self.device)).sum()
            return self.gather_{kind}(hits, len(loader.sampler.dataset))


    def run(local_rank, train_set, valid_set, model):
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        valid_sampler = DistributedSampler(valid_set, shuffle=False)
        valid_loader = DataLoader(valid_set, batch_size=256, sampler=valid_sampler)
        trainer = Trainer(model, local_rank)
        print("hit rate", trainer.evaluate(valid_loader))
        dist.destroy_process_group()
    """


def test_a_method_that_gathers_and_sums_the_metric_counts_the_padding(tmp_path):
    _write(tmp_path, {"rec.py": RECOMMENDER.format(kind="mean", result="merged.sum() / n")})
    assert _findings(tmp_path, "rec.py", select="DDP018") == {("rec.py", 29, "DDP018")}


def test_a_method_that_gathers_and_trims_the_predictions_is_clean(tmp_path):
    _write(tmp_path, {"rec.py": RECOMMENDER.format(kind="all", result="merged[:n]")})
    assert _findings(tmp_path, "rec.py", select="DDP018") == set()


VOCODER_TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from weighting import LossWeigher


    def evaluate(net, loader):
        net.eval()
        total = torch.zeros(2, device="cuda")
        with torch.no_grad():
            for k, (wav, mel) in enumerate(loader):
                CAP
                total[0] += torch.nn.functional.l1_loss(net(mel.cuda()), wav.cuda(), reduction="sum")
                total[1] += wav.numel()
        REDUCE
        return (total[0] / total[1]).item()


    def main(train_set, valid_set, epochs):
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank % torch.cuda.device_count())
        net = DDP(torch.nn.Linear(80, 256).cuda())
        optimizer = torch.optim.Adam(net.parameters(), lr=3e-4)
        weigher = LossWeigher()
        train_loader = DataLoader(train_set, batch_size=16, sampler=DistributedSampler(train_set))
        valid_loader = DataLoader(valid_set, batch_size=16, sampler=DistributedSampler(valid_set, shuffle=False))
        for epoch in range(epochs):
            net.train()
            for wav, mel in train_loader:
                optimizer.zero_grad()
                out = net(mel.cuda())
                losses = {"l1": (out - wav.cuda()).abs().mean(), "l2": ((out - wav.cuda()) ** 2).mean()}
                weigher.backward(losses, out)
                losses["l1"].backward()
                optimizer.step()
            score = evaluate(net, valid_loader)
            if rank == 0:
                print(epoch, score)
        dist.destroy_process_group()
    """

WEIGHTING = """\
    import torch
    import torch.distributed as dist


    class LossWeigher:
        def backward(self, losses, out):
            norms = torch.stack([torch.autograd.grad(l, out, retain_graph=True)[0].norm() for l in losses.values()])
            dist.all_reduce(norms)
            norms /= dist.get_world_size()
            grad = sum(torch.autograd.grad(l, out, retain_graph=True)[0] / n for l, n in zip(losses.values(), norms))
            out.backward(grad, retain_graph=True)
    """


def _vocoder(tmp_path, cap="pass", reduce="pass"):
    _write(tmp_path, {"weighting.py": WEIGHTING,
                      "train.py": VOCODER_TRAIN.replace("CAP", cap).replace("REDUCE", reduce)})
    return _findings(tmp_path, "train.py", select="DDP018")


def test_an_all_reduce_in_the_training_step_does_not_make_the_evaluation_metric_reduced(tmp_path):
    assert _vocoder(tmp_path) == set()
    # The evaluation's own sums reduced across ranks: the padded samples count twice.
    assert _vocoder(tmp_path, reduce="dist.all_reduce(total)") == {("train.py", 30, "DDP018")}


def test_an_evaluation_capped_at_a_number_of_batches_reduces_an_estimate(tmp_path):
    assert _vocoder(tmp_path, cap="if k >= 50:\n                    break", reduce="dist.all_reduce(total)") == set()
    # A test on the counter that does not stop the loop caps nothing.
    assert _vocoder(tmp_path, cap="if k >= 50:\n                    print(k)", reduce="dist.all_reduce(total)") \
        == {("train.py", 31, "DDP018")}


GATHERED_PREDICTIONS = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def gather_all(tensor, world_size):
        parts = [torch.zeros_like(tensor) for _ in range(world_size)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)


    @torch.no_grad()
    def evaluate(model, loader, world_size):
        model.eval()
        hits = torch.tensor([])
        for images, labels in loader:
            hits = torch.cat([hits, (model(images).argmax(-1) == labels).float()])
        hits = gather_all(hits, world_size)
        {use}


    def main(train_set, test_set, epochs):
        dist.init_process_group("gloo")
        world_size = dist.get_world_size()
        model = DDP(torch.nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * world_size)
        train_sampler = DistributedSampler(train_set)
        train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler)
        test_sampler = DistributedSampler(test_set, shuffle=False)
        test_loader = DataLoader(test_set, batch_size=32, sampler=test_sampler)
        for epoch in range(epochs):
            train_sampler.set_epoch(epoch)
            for images, labels in train_loader:
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            accuracy = evaluate(model, test_loader, world_size)
            if dist.get_rank() == 0:
                print(f"epoch {epoch}: accuracy {accuracy:.3f}")
        dist.destroy_process_group()
    """


def test_gathered_predictions_averaged_whole_count_the_padding(tmp_path):
    # Every rank's per-sample hits gathered and averaged as they are: the sampler's repeated
    # samples count twice, as with an all-reduce of sums.
    # A count of the gathered rows counts the repeats too (the padded length, not the set's).
    for use in ("return (hits.sum() / len(hits)).item()", "return hits.mean().item()", "return len(hits)"):
        _write(tmp_path, {"train.py": GATHERED_PREDICTIONS.replace("{use}", use)})
        assert _findings(tmp_path, "train.py", select="DDP018") == {("train.py", 30, "DDP018")}, use


def test_gathered_predictions_trimmed_to_the_set_stay_clean(tmp_path):
    # Trimmed to the dataset's length before the mean (a rebinding), or the repeats dropped by
    # sample index: exact.
    for use in ("hits = hits[:len(loader.dataset)]\n        return hits.mean().item()",
                "return torch.unique(hits, dim=0).mean().item()"):
        _write(tmp_path, {"train.py": GATHERED_PREDICTIONS.replace("{use}", use)})
        assert _findings(tmp_path, "train.py", select="DDP018") == set(), use
