"""A padded evaluation sampler where the only reductions over the ranks are a meter logger's
synchronisation (its meters' counts and totals all-reduced), through `ddpcheck lint` (DDP018).
A training epoch that synchronises its loss meters after its loop reduces training statistics;
an evaluation that makes a meter logger and never feeds it (its scores come from an evaluator
that merges predictions by sample) reduces nothing of the evaluation set. An evaluation that
feeds its meters a per-batch value is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

METERS = """\
    from collections import defaultdict

    import torch
    import torch.distributed as dist


    class Meter:
        def __init__(self):
            self.count = 0
            self.total = 0.0

        def update(self, value, n=1):
            self.count += n
            self.total += value * n

        def synchronize_between_processes(self):
            t = torch.tensor([self.count, self.total], dtype=torch.float64, device="cuda")
            dist.all_reduce(t)
            self.count = int(t[0].item())
            self.total = t[1].item()

        @property
        def global_avg(self):
            return self.total / max(self.count, 1)


    class MeterLogger:
        def __init__(self):
            self.meters = defaultdict(Meter)

        def update(self, **values):
            for k, v in values.items():
                self.meters[k].update(v)

        def add_meter(self, name, meter):
            self.meters[name] = meter

        def synchronize_between_processes(self):
            for meter in self.meters.values():
                meter.synchronize_between_processes()

        def __str__(self):
            return " ".join(f"{k} {m.global_avg:.4f}" for k, m in self.meters.items())
    """

ENGINE = """\
    import torch

    from meters import Meter, MeterLogger


    def train_one_epoch(model, loader, optimizer):
        model.train()
        logger = MeterLogger()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            logger.update(loss=loss.item())
        logger.synchronize_between_processes()
        return {k: m.global_avg for k, m in logger.meters.items()}


    @torch.no_grad()
    def evaluate(model, loader, scorer):
        model.eval()
        logger = MeterLogger()
        logger.add_meter("error", Meter())
        for x, ids in loader:
            FEED
        logger.synchronize_between_processes()
        print("averaged:", logger)
        return scorer.summarize()
    """

MAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from engine import evaluate, train_one_epoch


    def main(train_set, val_set, scorer):
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(8, 4).cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_sampler = DistributedSampler(train_set)
        val_sampler = DistributedSampler(val_set, shuffle=False)
        train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler)
        val_loader = DataLoader(val_set, batch_size=32, sampler=val_sampler)
        for epoch in range(10):
            train_sampler.set_epoch(epoch)
            train_one_epoch(model, train_loader, optimizer)
            evaluate(model, val_loader, scorer)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(None, None, None)
    """


def _lint(tmp_path: Path, feed: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"meters.py": METERS, "engine.py": ENGINE.replace("FEED", feed), "main.py": MAIN})
    return finding_set(tmp_path, "main.py", select="DDP018")


def test_meters_never_fed_by_the_evaluation_reduce_no_metric(tmp_path: Path) -> None:
    # Predictions go to an evaluator that keys them by sample id; the meters get nothing.
    assert _lint(tmp_path, "scorer.update(dict(zip(ids.tolist(), model(x.cuda()))))") == set()


def test_meters_fed_a_loss_by_the_evaluation_count_the_padding(tmp_path: Path) -> None:
    feed = "logger.update(loss=model(x.cuda()).mean().item())"
    assert _lint(tmp_path, feed) == {("main.py", 14, "DDP018")}


def test_a_meter_fed_through_the_logger_s_dict_counts_the_padding(tmp_path: Path) -> None:
    feed = 'logger.meters["error"].update(model(x.cuda()).mean().item())'
    assert _lint(tmp_path, feed) == {("main.py", 14, "DDP018")}


def test_an_evaluation_called_from_a_function_that_trains_inline_still_counts(tmp_path: Path) -> None:
    # The epoch loop trains in its own inner loop, then calls the evaluation, whose meters are
    # fed a loss: the call is no training statistic.
    main = MAIN.replace("""            train_one_epoch(model, train_loader, optimizer)
""", """            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
""")
    assert "backward" in main
    engine = ENGINE.replace("FEED", "logger.update(loss=model(x.cuda()).mean().item())")
    write_project(tmp_path, {"meters.py": METERS, "engine.py": engine, "main.py": main})
    assert finding_set(tmp_path, "main.py", select="DDP018") == {("main.py", 14, "DDP018")}


def test_an_evaluation_method_of_a_local_object_is_no_meter_sync(tmp_path: Path) -> None:
    # `runner.evaluate()` reads the padded loader itself and all-reduces its sum: whatever the
    # runner was fed, the method is no synchronisation of fed meters.
    script = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler


    class Runner:
        def __init__(self, model, loader):
            self.model, self.loader = model, loader

        @torch.no_grad()
        def evaluate(self):
            total = torch.zeros(1, device="cuda")
            for x, y in self.loader:
                total += (self.model(x.cuda()).argmax(1) == y.cuda()).sum()
            dist.all_reduce(total)
            return total.item()


    def main(model, val_set):
        dist.init_process_group("nccl")
        val_sampler = DistributedSampler(val_set, shuffle=False)
        runner = Runner(model, DataLoader(val_set, batch_size=16, sampler=val_sampler))
        print(runner.evaluate())
    """
    write_project(tmp_path, {"main.py": script})
    assert finding_set(tmp_path, "main.py", select="DDP018") == {("main.py", 21, "DDP018")}
