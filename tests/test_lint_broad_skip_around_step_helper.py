"""`except Exception: continue` around a step helper handed the DDP model (its forward and
backward run in the helper): a rank that meets an error alone skips a backward the others make.
The loop pairs with the other ranks through the helper's forward of the wrapper, as it would
through a forward written in the loop. Through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def step_on(net, optimizer, batch):
        optimizer.zero_grad()
        loss = net(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.item()


    def fit(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        net = WRAP
        optimizer = torch.optim.Adam(net.parameters())
        batches = [torch.randn(16, 8).cuda() for _ in range(100)]
        for epoch in range(10):
            for batch in batches:
                try:
                    value = step_on(net, optimizer, batch)
                except Exception as err:
                    torch.cuda.empty_cache()
                    print(err)
                    continue
        dist.destroy_process_group()


    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        torch.multiprocessing.spawn(fit, args=(world_size,), nprocs=world_size)
    """


def _skips(tmp_path, wrap: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, {"train.py": TRAIN.replace("WRAP", wrap)})
    return _findings(tmp_path, "train.py", select="DDP035")


def test_a_skip_past_a_step_helper_handed_the_ddp_model_is_reported(tmp_path):
    assert _skips(tmp_path, "DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[rank])") == {("train.py", 29, "DDP035")}


def test_the_same_skip_around_a_plain_model_is_clean(tmp_path):
    # No wrapper: nothing in the loop pairs with the other ranks.
    assert _skips(tmp_path, "torch.nn.Linear(8, 8).cuda()") == set()
