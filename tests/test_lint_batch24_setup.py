"""Set-up rules on mechanisms seen on public scripts of batch 24: a CPU wrap that names no GPU
(DDP003), and the global rank reaching a device through a GPU list or a list kept on an object
(DDP007). Each through `ddpcheck lint` on a small project written in the style of the scripts,
with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A CPU demo on gloo: the wrap spells out `device_ids=None` (or holds it in a name first).
CPU_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    def setup():
        os.environ["MASTER_ADDR"] = os.environ.get("MASTER_ADDR", "localhost")
        dist.init_process_group("gloo")
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(0)


    def main():
        setup()
        device = torch.device({device})
        ids = None
        model = torch.nn.Linear(8, 2).to(device)
        model = DistributedDataParallel(model, device_ids={ids}, output_device=None)
        for x in torch.utils.data.DataLoader(torch.randn(16, 8), batch_size=4):
            model(x.to(device)).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_cpu_wrap_with_device_ids_none_is_clean(tmp_path: Path) -> None:
    files = {"train.py": CPU_SCRIPT.format(device='"cpu"', ids="None")}
    assert lines(tmp_path, files, "DDP003") == []


def test_cpu_wrap_with_device_ids_held_as_none_is_clean(tmp_path: Path) -> None:
    files = {"train.py": CPU_SCRIPT.format(device='"cpu"', ids="ids")}
    assert lines(tmp_path, files, "DDP003") == []


def test_gpu_wrap_beside_a_gloo_group_is_still_reported(tmp_path: Path) -> None:
    # A GPU named in the wrap is CUDA work, whatever the backend.
    files = {"train.py": CPU_SCRIPT.format(device='"cuda"', ids="[0]")}
    assert lines(tmp_path, files, "DDP003") == [("train.py", 9)]


# The GPU is looked up in a configured list by the rank; the list of device ids is handed to
# the wrap through a field of the run's settings.
LIST_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from settings import config


    def main():
        dist.init_process_group("nccl")
        rank = {rank}
        device_id = config.gpu_ids[rank]
        torch.cuda.set_device(device_id)
        model = DDP(torch.nn.Linear(8, 2).to(device_id), device_ids=[device_id])
        model(torch.randn(4, 8).to(device_id)).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

SETTINGS = """\
    class Config:
        gpu_ids = [0, 1, 2, 3]
        lr = 0.1


    config = Config()
"""


def test_gpu_list_looked_up_by_the_global_rank(tmp_path: Path) -> None:
    files = {"settings.py": SETTINGS, "train.py": LIST_SCRIPT.format(rank="dist.get_rank()")}
    assert lines(tmp_path, files, "DDP007") == [("train.py", 11)]


def test_gpu_list_looked_up_by_the_local_rank_is_clean(tmp_path: Path) -> None:
    files = {"settings.py": SETTINGS, "train.py": LIST_SCRIPT.format(rank='int(os.environ["LOCAL_RANK"])')}
    assert lines(tmp_path, files, "DDP007") == []


def test_other_list_looked_up_by_the_global_rank_is_clean(tmp_path: Path) -> None:
    # A list whose name says nothing of devices (the seeds of each rank) is no GPU list.
    files = {"settings.py": SETTINGS.replace("gpu_ids", "seeds"),
             "train.py": LIST_SCRIPT.format(rank="dist.get_rank()")
             .replace("device_id = config.gpu_ids[rank]", "device_id = int(os.environ['LOCAL_RANK'])\n"
                      "        torch.manual_seed(config.seeds[rank])")}
    assert lines(tmp_path, files, "DDP007") == []


IDS_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist


    class Args:
        lr = 3e-5
        device_ids = None


    def main():
        dist.init_process_group(backend="nccl")
        device_ids = [{index}]
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        args = Args()
        args.device_ids = device_ids
        model = torch.nn.Linear(8, 2)
        model.cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=args.device_ids)
        model(torch.randn(4, 8).cuda()).sum().backward()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_device_ids_kept_on_an_object_from_the_global_rank(tmp_path: Path) -> None:
    files = {"train.py": IDS_SCRIPT.format(index="dist.get_rank()")}
    assert lines(tmp_path, files, "DDP007") == [("train.py", 13)]


def test_device_ids_kept_on_an_object_from_the_local_rank_is_clean(tmp_path: Path) -> None:
    files = {"train.py": IDS_SCRIPT.format(index='int(os.environ["LOCAL_RANK"])')}
    assert lines(tmp_path, files, "DDP007") == []
