"""DDP020 for a progress bar entered with `with` (`with tqdm.trange(...) as bar:`): a bar's
`__enter__` returns the bar itself, so the loop over `bar` (or the `bar.update(1)` at each step)
drives it as the plain binding `bar = tqdm(...)` would. Through `ddpcheck lint --select DDP020`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAIN = """\
    import torch
    import torch.distributed as dist
    import tqdm
    from torch.nn.parallel import DistributedDataParallel as DDP


    def fit_epoch(net, optimizer, loader):
        for x in loader:
            loss = net(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        net = DDP(torch.nn.Linear(4, 1).cuda())
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(torch.randn(64, 4), batch_size=8)
    {body}
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _train(body: str) -> dict[str, str]:
    return {"train.py": TRAIN.replace("    {body}", body)}


def test_epoch_bar_entered_with_is_reported(tmp_path: Path) -> None:
    # `leave=` only keeps the finished bar on screen: every rank still draws it.
    body = """\
        with tqdm.trange(0, 10, desc="epochs", leave=(rank == 0)) as epochs:
            for epoch in epochs:
                fit_epoch(net, optimizer, loader)
"""
    assert lines(tmp_path, _train(body), "DDP020") == [("train.py", 21)]


def test_bar_entered_with_and_advanced_per_step_is_reported(tmp_path: Path) -> None:
    body = """\
        with tqdm.tqdm(total=len(loader)) as shown:
            for x in loader:
                loss = net(x).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                shown.update(1)
"""
    assert lines(tmp_path, _train(body), "DDP020") == [("train.py", 21)]


def test_bar_entered_with_and_disabled_off_rank_zero_is_clean(tmp_path: Path) -> None:
    body = """\
        with tqdm.trange(0, 10, desc="epochs", disable=rank != 0) as epochs:
            for epoch in epochs:
                fit_epoch(net, optimizer, loader)
"""
    assert lines(tmp_path, _train(body), "DDP020") == []
