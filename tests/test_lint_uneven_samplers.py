"""Project samplers that keep their rank's indices without evening the shards out, through
`ddpcheck lint`: the training loader's ranks get different numbers of batches."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SAMPLERS = """\
    from torch.utils.data import Sampler


    class StridedBatchSampler(Sampler):
        def __init__(self, size, batch_size, rank, world_size):
            self.size = size
            self.batch_size = batch_size
            self.rank = rank
            self.world_size = world_size

        def __iter__(self):
            batch = []
            for idx in range(self.size):
                if idx % self.world_size != self.rank:
                    continue
                batch.append(idx)
                if len(batch) == self.batch_size:
                    yield batch
                    batch = []
            if batch:
                yield batch
    """

TRAIN = """\
    import threading

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    from samplers import StridedBatchSampler


    def prefetch(events):
        pass


    def main(events, model):
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(rank % torch.cuda.device_count())
        loader_thread = None
        train_sampler = StridedBatchSampler(len(events), 600, rank, world)
        train_loader = DataLoader(events, batch_sampler=train_sampler)
        model = DDP(model.cuda())
        opt = torch.optim.Adam(model.parameters(), lr=1e-4 * world)
        loader_thread = threading.Thread(target=prefetch, args=(events,))
        loader_thread.start()
        for epoch in range(10):
            for batch in train_loader:
                opt.zero_grad()
                model(batch.cuda()).mean().backward()
                opt.step()
        loader_thread.join()
        dist.destroy_process_group()
    """


def test_a_training_sampler_that_keeps_its_ranks_indices_unevenly_is_reported(tmp_path):
    _write(tmp_path, {"samplers.py": SAMPLERS, "train.py": TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP034") == {("train.py", 20, "DDP034")}


def test_a_sampler_that_pads_to_a_total_size_is_clean(tmp_path):
    padded = SAMPLERS.replace(
        "            for idx in range(self.size):",
        "            total_size = -(-self.size // self.world_size) * self.world_size\n"
        "            for idx in [i % self.size for i in range(total_size)]:")
    _write(tmp_path, {"samplers.py": padded, "train.py": TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP034") == set()


def test_the_same_sampler_on_the_validation_loader_only_is_clean(tmp_path):
    evaluation = TRAIN.replace("train_sampler", "val_sampler").replace("train_loader", "val_loader")
    _write(tmp_path, {"samplers.py": SAMPLERS, "train.py": evaluation})
    assert _findings(tmp_path, "train.py", select="DDP034") == set()


def test_an_endless_sampler_never_runs_out_and_is_clean(tmp_path):
    endless = SAMPLERS.replace("            for idx in range(self.size):",
                               "            idx = -1\n            while True:\n                idx = (idx + 1) % self.size")
    _write(tmp_path, {"samplers.py": endless, "train.py": TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP034") == set()
