"""False findings met on a seventh batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, and the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


PROGRESS_ON_RANK_ZERO = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    def is_main_process(rank):
        return rank in (-1, 0)


    def train(net, train_loader, optimizer, local_rank, epochs):
        for epoch in range(epochs):
            loop = train_loader
            if is_main_process(local_rank):
                loop = tqdm(train_loader, desc="train")
            for step, (x, y) in enumerate(loop):
                loss = torch.nn.functional.mse_loss(net(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                dist.barrier()


    if __name__ == "__main__":
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
        train(net, [], torch.optim.SGD(net.parameters(), lr=0.1), local_rank, 3)
        dist.destroy_process_group()
"""


def test_progress_bar_made_on_rank_zero_iterates_the_same_batches(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": PROGRESS_ON_RANK_ZERO}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # `from tqdm.auto import tqdm` and the keyword spelling are the same bar.
    auto = PROGRESS_ON_RANK_ZERO.replace("from tqdm import tqdm", "from tqdm.auto import tqdm").replace(
        "tqdm(train_loader,", "tqdm(iterable=train_loader,")
    findings = lint_project(tmp_path, {"train.py": auto}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == []
    # A bar over a slice of the batches does change the count: still reported.
    sliced = PROGRESS_ON_RANK_ZERO.replace("tqdm(train_loader,", "tqdm(train_loader[:10],")
    findings = lint_project(tmp_path, {"train.py": sliced}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [18]
    # So does rank 0 iterating something else than the other ranks.
    other = PROGRESS_ON_RANK_ZERO.replace("loop = tqdm(train_loader,", "loop = tqdm(range(10),")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP009")
    assert _lines(findings, "DDP009") == [18]
