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


COMPILE_FLAG = """\
    import argparse
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--compile", action="store_true")
        opts = parser.parse_args()
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(rank)
        net = DDP(nn.Linear(8, 2).cuda(), device_ids=[rank])
        if opts.compile:
            net = torch.compile(net)
        for epoch in range(2):
            if rank == 0:
                if opts.compile:
                    weights = net._orig_mod.module.state_dict()
                else:
                    weights = net.module.state_dict()
                torch.save(weights, "last.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_orig_mod_read_under_the_flag_that_compiled_the_model_is_not_reported(tmp_path: Path) -> None:
    findings = lint_project(tmp_path, {"train.py": COMPILE_FLAG}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == []
    # Read under another test, the wrapper may not be compiled there: reported.
    other = COMPILE_FLAG.replace("                if opts.compile:\n                    weights",
                                 "                if epoch > 0:\n                    weights")
    findings = lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == [21]
    # The options read again in between: the second test may not ask the same question.
    changed = COMPILE_FLAG.replace("        for epoch in range(2):\n",
                                   "        opts = parser.parse_args()\n        for epoch in range(2):\n")
    findings = lint_project(tmp_path, {"train.py": changed}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == [22]
    # Compiled first and wrapped after, `._orig_mod` is asked of the DDP wrapper: still reported.
    inner = COMPILE_FLAG.replace(
        "        net = DDP(nn.Linear(8, 2).cuda(), device_ids=[rank])\n        if opts.compile:\n"
        "            net = torch.compile(net)\n",
        "        net = nn.Linear(8, 2).cuda()\n        if opts.compile:\n            net = torch.compile(net)\n"
        "        net = DDP(net, device_ids=[rank])\n")
    findings = lint_project(tmp_path, {"train.py": inner}, "train.py", select="DDP025")
    assert _lines(findings, "DDP025") == [22]
