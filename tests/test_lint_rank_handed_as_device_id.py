"""The global rank handed to a project class's parameter named for a device, which passes it on
as a library's `device_id=` (a DALI pipeline): the rank becomes a device where each caller hands
it over. Through `ddpcheck lint` on a small trainer with a DALI loader module; the local rank
stays clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

DALI_DATA = """\
    import os

    from nvidia.dali.plugin.pytorch import DALIClassificationIterator

    from pipelines import TrainPipe


    class DaliImageNet:
        def __init__(self, root, batch_size, num_threads=8, device_id=0, world_size=1):
            pipe = TrainPipe(batch_size=batch_size, num_threads=num_threads, device_id=device_id,
                             data_dir=os.path.join(root, "train"), world_size=world_size)
            pipe.build()
            self.loader_train = DALIClassificationIterator(pipelines=pipe, auto_reset=True)
"""

PIPES = """\
    from nvidia.dali.pipeline import Pipeline


    class TrainPipe(Pipeline):
        def __init__(self, batch_size, num_threads, device_id, data_dir, world_size):
            super().__init__(batch_size, num_threads, device_id, seed=-1)
            self.data_dir = data_dir
"""

SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dali_data import DaliImageNet


    class Trainer:
        def __init__(self, root):
            self.root = root
            self.rank = -1
            self.local_rank = -1

        def setup(self):
            dist.init_process_group("nccl")
            self.rank = dist.get_rank()
            self.local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(self.local_rank)

        def data(self):
            dataset = DaliImageNet(
                self.root,
                256,
                8,
                self.rank,
                dist.get_world_size(),
            )
            self.loader = dataset.loader_train

        def run(self):
            self.setup()
            self.data()
            model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[self.local_rank])
            for batch in self.loader:
                model(batch[0]["data"]).sum().backward()
            dist.destroy_process_group()


    if __name__ == "__main__":
        Trainer("/data/imagenet").run()
"""


def test_the_rank_handed_to_a_device_id_parameter_is_reported_where_it_is_handed(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT, "dali_data.py": DALI_DATA, "pipelines.py": PIPES}
    assert lines(tmp_path, files, "DDP007") == [("train.py", 27)]


def test_the_local_rank_handed_over_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SCRIPT.replace("                self.rank,\n", "                self.local_rank,\n"),
             "dali_data.py": DALI_DATA, "pipelines.py": PIPES}
    assert lines(tmp_path, files, "DDP007") == []
