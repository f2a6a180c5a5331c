"""DDP035 where the loop makes a collective before its skip, but one that cannot have agreed on
what the skip tests: a logging reduction of a stacked copy of the losses (`loss_dict_reduced =
reduce_dict(loss_dict)`) or of the step's timing, then `if torch.isnan(losses): continue` or `if
finite(loss.item()): loss.backward()`. A collective on the tested value itself (torch's own, in
place, or a project helper that reduces its parameter in place) still counts as agreement.
Through `ddpcheck lint --select DDP035`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAIN = """\
    import math
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def reduce_logs(logs):
        values = torch.stack([logs[k] for k in sorted(logs)])
        dist.all_reduce(values)
        return {k: v / dist.get_world_size() for k, v in zip(sorted(logs), values)}


    def reduce_in_place(tensor):
        dist.all_reduce(tensor)
        tensor /= dist.get_world_size()
        return tensor


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(16, 1).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        for step in range(1000):
            x = torch.randn(8, 16).cuda()
            logs = {"loss": net(x).pow(2).mean()}
            loss = logs["loss"]
    {body}
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _train(body: str) -> dict[str, str]:
    return {"train.py": TRAIN.replace("    {body}", body)}


def test_skip_after_a_reduction_of_a_copy_is_reported(tmp_path: Path) -> None:
    body = """\
            shown = reduce_logs(logs)
            if torch.isnan(loss):
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""
    assert lines(tmp_path, _train(body), "DDP035") == [("train.py", 33)]


def test_guarded_backward_after_a_timing_reduction_is_reported(tmp_path: Path) -> None:
    body = """\
            took = torch.tensor([float(step)]).cuda()
            dist.all_reduce(took)
            if math.isfinite(loss.item()):
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""
    assert lines(tmp_path, _train(body), "DDP035") == [("train.py", 33)]


def test_skip_after_torch_reduces_the_tested_loss_is_clean(tmp_path: Path) -> None:
    body = """\
            dist.all_reduce(loss)
            if torch.isnan(loss):
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""
    assert lines(tmp_path, _train(body), "DDP035") == []


def test_skip_after_a_helper_reduces_the_tested_loss_in_place_is_clean(tmp_path: Path) -> None:
    body = """\
            reduce_in_place(loss)
            if torch.isnan(loss):
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""
    assert lines(tmp_path, _train(body), "DDP035") == []


def test_guarded_backward_on_a_reduced_value_is_clean(tmp_path: Path) -> None:
    body = """\
            agreed = reduce_logs(logs)["loss"]
            if math.isfinite(agreed.item()):
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""
    assert lines(tmp_path, _train(body), "DDP035") == []
