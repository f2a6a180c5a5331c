"""DDP022 through `ddpcheck lint`: a DDP communication hook that sums the gradient bucket over
ranks and never divides by the world size (DDP expects the hook to average), also when the hook
is a closure a factory in a project module returns and the script registers."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

HOOKS = """\
import torch
import torch.distributed as dist


def make_topk_hook(keep):
    def topk_hook(state, bucket{annotation}):
        grad = bucket.buffer()
        kept = torch.sign(grad) * grad.abs().clamp(max=keep)
{scale}        fut = dist.all_reduce(kept, op=dist.ReduceOp.SUM, async_op=True).get_future()

        def unpack(done):
            out = torch.zeros_like(grad)
            out[: grad.size(0) // 2] = done.value()[0][: grad.size(0) // 2]
            return out

        return fut.then(unpack)

    return topk_hook
"""

MAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from hooks import make_topk_hook


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(x)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(Net().cuda(), device_ids=[local_rank])
    model.register_comm_hook(state=None, hook=make_topk_hook(1.0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _lint(tmp_path, annotation: str = ": dist.GradBucket", scale: str = "") -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": MAIN, "hooks.py": HOOKS.format(annotation=annotation, scale=scale)})
    return _findings(tmp_path, "train.py", select="DDP022")


def test_a_hook_summing_the_bucket_without_dividing_is_reported_at_the_reduce(tmp_path):
    # The hook is a closure of a factory in another module: reached through the factory's call.
    assert _lint(tmp_path) == {("hooks.py", 9, "DDP022")}


def test_an_unannotated_bucket_parameter_is_read_the_same(tmp_path):
    assert _lint(tmp_path, annotation="") == {("hooks.py", 9, "DDP022")}


def test_a_hook_dividing_by_the_group_size_is_clean(tmp_path):
    scale = "        kept.div_(dist.get_world_size())\n"
    assert _lint(tmp_path, scale=scale) == set()


def test_a_hook_scaling_by_a_factor_it_is_handed_is_clean(tmp_path):
    # Some factor the lint cannot read (the state's): the hook may average; unknown.
    scale = "        kept = kept * state.factor\n"
    assert _lint(tmp_path, scale=scale) == set()


def test_a_parameter_not_annotated_as_a_bucket_is_clean(tmp_path):
    # `buffer()` of something else: not a gradient bucket.
    assert _lint(tmp_path, annotation=": torch.Tensor") == set()
