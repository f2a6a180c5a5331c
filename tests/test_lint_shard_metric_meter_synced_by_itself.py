"""Unreduced shard metric (DDP036) beside a meter that synchronises itself: `acc_meter.all_reduce()`
on a meter the evaluation made reduces that meter only, not the loss meter fed beside it; and a
returned tuple is followed place by place (`val_loss, val_acc = evaluate(...)`: the loss is the
shard's, the accuracy every rank's). Through `ddpcheck lint`, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    class Meter:
        def __init__(self):
            self.sum = 0.0
            self.count = 0

        def update(self, value, n=1):
            self.sum += value * n
            self.count += n

        @property
        def avg(self):
            return self.sum / max(self.count, 1)

        def all_reduce(self):
            total = torch.tensor([self.sum, self.count], dtype=torch.float64, device="cuda")
            dist.all_reduce(total)
            self.sum, self.count = total.tolist()


    def evaluate(net, loader):
        loss_meter = Meter()
        acc_meter = Meter()
        with torch.no_grad():
            for x, y in loader:
                out = net(x.cuda())
                loss_meter.update(torch.nn.functional.cross_entropy(out, y.cuda()).item(), x.size(0))
                acc_meter.update((out.argmax(1).cpu() == y).float().mean().item(), x.size(0))
        {sync}
        return loss_meter.avg, acc_meter.avg


    def main():
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        net = DistributedDataParallel(build().cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=32, sampler=DistributedSampler(val_set, shuffle=False))
        for epoch in range(30):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            val_loss, val_acc = evaluate(net, val_loader)
            if dist.get_rank() == 0:
                print({shown})


    if __name__ == "__main__":
        main()
"""

BOTH = 'f"epoch {epoch} val loss {val_loss:.4f} acc {val_acc:.3f}"'


def test_loss_beside_a_meter_that_synchronises_itself_is_reported(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT.format(sync="acc_meter.all_reduce()", shown=BOTH)}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 54)]


def test_only_the_synchronised_figure_shown_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT.format(sync="acc_meter.all_reduce()", shown='f"acc {val_acc:.3f}"')}
    assert lines(tmp_path, files, "DDP036") == []


def test_both_meters_synchronised_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT.format(sync="acc_meter.all_reduce(); loss_meter.all_reduce()", shown=BOTH)}
    assert lines(tmp_path, files, "DDP036") == []
