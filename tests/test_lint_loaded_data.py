"""`torch.load` of data rather than a checkpoint, through `ddpcheck lint`: what is loaded goes into
a DataLoader or a Dataset (directly or through the project function that builds one), never into
a `load_state_dict`. Each test writes a small project in the style of real training code."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


LOADERS = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def make_partition_loader(graphs, batch_size, rank, world_size):
        parts = [graphs[i:i + batch_size] for i in range(0, len(graphs), batch_size)]
        sampler = DistributedSampler(parts, num_replicas=world_size, rank=rank, shuffle=False)
        return DataLoader(parts, batch_size=1, sampler=sampler)
"""

GRAPH_TRAIN = """\
    from glob import glob

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils.loaders import make_partition_loader


    def train(rank, world_size, data_dir):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        model = DDP(torch.nn.Linear(16, 16).to(rank), device_ids=[rank])
        files = sorted(glob(data_dir + "/*/*.pt"))
        for epoch in range(3):
            for path in files[rank::world_size]:
                graphs = torch.load(path, weights_only=False)
                loader = make_partition_loader(graphs, 32, rank, world_size)
                for batch in loader:
                    model(batch)
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(train, args=(2, "data"), nprocs=2)
"""

SHARD_DATASET = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler


    class ShardDataset(Dataset):
        def __init__(self, samples):
            self.samples = samples

        def __len__(self):
            return len(self.samples)

        def __getitem__(self, i):
            return self.samples[i]


    class Runner:
        def __init__(self, shard_path):
            dist.init_process_group("nccl")
            self.local_rank = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(self.local_rank)
            samples = torch.load(shard_path)
            dataset = ShardDataset(samples)
            self.loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))

        def close(self):
            dist.destroy_process_group()


    if __name__ == "__main__":
        Runner("train_shard.pt").close()
"""

TENSORS_LOADER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    inputs = torch.load("inputs.pt")
    loader = DataLoader(inputs, batch_size=4, sampler=DistributedSampler(inputs))
    for batch in loader:
        pass
    dist.destroy_process_group()
"""


def test_loads_handed_to_a_loader_or_dataset_are_data(tmp_path: Path) -> None:
    files = {"utils/__init__.py": "", "utils/loaders.py": LOADERS, "main_ddp.py": GRAPH_TRAIN}
    findings = lint_project(tmp_path, files, "main_ddp.py", select="DDP011")
    assert _lines(findings, "DDP011") == []
    findings = lint_project(tmp_path, {"run.py": SHARD_DATASET}, "run.py", select="DDP011")
    assert _lines(findings, "DDP011") == []
    findings = lint_project(tmp_path, {"prep.py": TENSORS_LOADER}, "prep.py", select="DDP011")
    assert _lines(findings, "DDP011") == []


def test_checkpoints_are_still_reported(tmp_path: Path) -> None:
    # Loaded into the model as well: a checkpoint that also carries data.
    both = GRAPH_TRAIN.replace("                loader = make_partition_loader(graphs, 32, rank, world_size)",
                               "                model.module.load_state_dict(graphs[\"model\"])\n"
                               "                loader = make_partition_loader(graphs, 32, rank, world_size)")
    files = {"utils/__init__.py": "", "utils/loaders.py": LOADERS, "main_ddp.py": both}
    findings = lint_project(tmp_path, files, "main_ddp.py", select="DDP011")
    assert _lines(findings, "DDP011") == [18]
    # Only an entry goes to the loader builder: the rest of the file is not known to be data.
    # (One fixed file, so it is not a shard read per pass of the loop either.)
    entry = GRAPH_TRAIN.replace("make_partition_loader(graphs, 32", "make_partition_loader(graphs[\"data\"], 32").replace(
        "torch.load(path,", "torch.load(data_dir + \"/graphs.pt\",")
    files = {"utils/__init__.py": "", "utils/loaders.py": LOADERS, "main_ddp.py": entry}
    findings = lint_project(tmp_path, files, "main_ddp.py", select="DDP011")
    assert _lines(findings, "DDP011") == [18]
    # Handed to a function that builds no loader.
    plain = SHARD_DATASET.replace("dataset = ShardDataset(samples)", "dataset = ShardDataset(list(range(8)))\n"
                                  "            self.net = build_net(samples)")
    findings = lint_project(tmp_path, {"run.py": plain}, "run.py", select="DDP011")
    assert _lines(findings, "DDP011") == [25]
