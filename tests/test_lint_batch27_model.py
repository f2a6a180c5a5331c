"""What the lint reads of a network and of a DDP wrapper, on mechanisms seen on public scripts of
batch 27: the buffers of torch's own layers (DDP009), each through `ddpcheck lint` on a small
project written in the style of the scripts, with a variant that must stay silent or be reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# Rank 0 evaluates through the DDP wrapper after training, in a function that never
# back-propagates: a hang only when DDP's forward makes a collective, that is when the wrapped
# network has buffers to broadcast or gradients are on (the forward may rebuild its buckets).
RANK0_EVAL = """\
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def final_eval(ddp_model, dataset, rank):
        if rank == 0:
            ddp_model.eval()
            {context}:
                for x, y in DataLoader(dataset, batch_size=64):
                    out = ddp_model(x.cuda())


    def main():
        dist.init_process_group(backend="nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dataset = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        model = nn.Sequential(nn.Linear(10, 64), {middle}, nn.Linear(64, 2)).to(local_rank)
        ddp_model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-3)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = nn.functional.cross_entropy(ddp_model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        final_eval(ddp_model, dataset, rank)
        torch.save(ddp_model.module.state_dict(), "model.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

NO_GRAD = "with torch.no_grad()"
GRAD_ON = "with torch.autocast(device_type=\"cuda\")"


def test_rank_zero_forward_of_a_sequential_of_bufferless_layers_is_clean(tmp_path: Path) -> None:
    files = {"train.py": RANK0_EVAL.format(context=NO_GRAD, middle="nn.ReLU()")}
    assert lines(tmp_path, files, "DDP009") == []


def test_rank_zero_forward_of_a_sequential_with_batchnorm_is_reported(tmp_path: Path) -> None:
    files = {"train.py": RANK0_EVAL.format(context=NO_GRAD, middle="nn.BatchNorm1d(64)")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 13)]


def test_rank_zero_forward_of_a_sequential_with_an_outside_layer_is_reported(tmp_path: Path) -> None:
    # A layer from another library: its buffers are unknown, so the forward may broadcast.
    files = {"train.py": RANK0_EVAL.format(context=NO_GRAD, middle="torchlayers.Normalize(64)").replace(
        "from torch import nn\n", "from torch import nn\n    import torchlayers\n")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 14)]


def test_rank_zero_forward_of_bufferless_layers_with_gradients_on_is_reported(tmp_path: Path) -> None:
    # With gradients on, DDP's forward may rebuild its buckets (a broadcast from rank 0), buffers
    # or not: only a forward under no_grad is known to make no collective.
    files = {"train.py": RANK0_EVAL.format(context=GRAD_ON, middle="nn.ReLU()")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 13)]
