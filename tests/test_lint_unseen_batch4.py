"""False findings met on a fourth batch of public scripts, through `ddpcheck lint`: each test writes
a small project in the style of such code, with the variant that is still reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


DEVICE_FROM_RANK = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    def fit(net, loader, epochs=3, device="cuda", out="net.pt"):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x in loader:
                loss = net(x.to(device)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            if device == 0:
                torch.save(net.module.state_dict(), out)
                print(f"epoch {epoch} loss {loss.item():.3f}")
            dist.barrier()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        device = rank % torch.cuda.device_count()
        torch.cuda.set_device(device)
        net = DistributedDataParallel(nn.Linear(4, 1).to(device), device_ids=[device])
        fit(net, [torch.randn(8, 4)], device=device)
        dist.destroy_process_group()
"""


def test_a_device_index_taken_from_the_rank_guards_like_the_local_rank(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": DEVICE_FROM_RANK}, "train.py", select="DDP010,DDP020")
    assert _lines(findings, "DDP010") == []
    assert _lines(findings, "DDP020") == []
    # An index taken from something other than the rank says nothing about which process runs.
    other = DEVICE_FROM_RANK.replace("device = rank % torch.cuda.device_count()",
                                     "device = len(__file__) % torch.cuda.device_count()")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP010,DDP020")
    assert _lines(findings, "DDP010") == [16]
    assert _lines(findings, "DDP020") == [17]
