"""Device set-up as real scripts write it, through `ddpcheck lint`: which GPU each rank uses."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

TTS_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        {set_device}
        dist.init_process_group("nccl")
        net = DDP(torch.nn.Conv1d(80, 192, 5).cuda(local_rank), device_ids=[local_rank])
        for step in range(100):
            net(torch.randn(4, 80, 100).cuda(local_rank)).mean().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_set_device_through_the_torch_module_held_by_torch_counts(tmp_path):
    # `torch.torch` is the torch module itself.
    _write(tmp_path, {"train.py": TTS_TRAIN.format(set_device="torch.torch.cuda.set_device(local_rank)")})
    assert _findings(tmp_path, "train.py", select="DDP003") == set()


def test_without_set_device_the_init_call_is_reported(tmp_path):
    _write(tmp_path, {"train.py": TTS_TRAIN.format(set_device="print(local_rank)")})
    assert _findings(tmp_path, "train.py", select="DDP003") == {("train.py", 11, "DDP003")}
