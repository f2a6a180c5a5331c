"""DDP029 where each rank takes its share of the data by hand in ways other than a sampler: a
contiguous block whose bounds come from the rank (ray batches cut at `bounds[rank]` and
`bounds[rank + 1]`), and the rank's item of a split into world-size parts in a dataset method
(MONAI's `partition_dataset(...)[rank]`), with MONAI's `set_determinism` seeding torch and its
`Rand...` transforms drawing. Through `ddpcheck lint --select DDP029`; per-rank seeds, one-bound
slices and runs that draw nothing stay clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


RAYS = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(1234)


    def jitter(near, far, n):
        t = torch.linspace(0.0, 1.0, n)
        z = near * (1.0 - t) + far * t
        return z + torch.rand(n) * (far - near) / n


    def worker(rank, world_size):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
        model = DDP(torch.nn.Linear(3, 4))
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
        rays = torch.randn(1024, 3)
        bounds = [i * rays.shape[0] // world_size for i in range(world_size + 1)]
        for step in range(100):
            mine = {share}
            points = mine * jitter(2.0, 6.0, mine.shape[0])[:, None]
            loss = model(points).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
"""


def _rays(share: str) -> dict[str, str]:
    return {"train.py": RAYS.replace("{share}", share)}


def test_block_with_both_bounds_from_the_rank_is_a_share(tmp_path: Path) -> None:
    # The module-level seed runs again in every spawned worker.
    assert lines(tmp_path, _rays("rays[bounds[rank]:bounds[rank + 1]]"), "DDP029") == [("train.py", 6)]


def test_block_of_rank_times_size_is_a_share(tmp_path: Path) -> None:
    files = _rays("rays[rank * 512:(rank + 1) * 512]")
    assert lines(tmp_path, files, "DDP029") == [("train.py", 6)]


def test_one_bound_from_the_rank_is_no_share(tmp_path: Path) -> None:
    # (No sampler, no dropout, no share in sight: nothing says the ranks' draws should differ.)
    assert lines(tmp_path, _rays("rays[rank:]"), "DDP029") == []


def test_block_seeded_per_rank_is_clean(tmp_path: Path) -> None:
    files = _rays("rays[bounds[rank]:bounds[rank + 1]]")
    files["train.py"] = files["train.py"].replace(
        "        model = DDP(torch.nn.Linear(3, 4))\n",
        "        torch.manual_seed(1234 + rank)\n        model = DDP(torch.nn.Linear(3, 4))\n")
    assert lines(tmp_path, files, "DDP029") == []


VOLUMES = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from monai.data import CacheDataset, DataLoader, partition_dataset
    from monai.networks.nets import UNet
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, {augment}
    from monai.utils import set_determinism
    from torch.nn.parallel import DistributedDataParallel


    class ShardedVolumes(CacheDataset):
        def __init__(self, items, transform):
            super().__init__(self._mine(items), transform)

        def _mine(self, items):
            return partition_dataset(items, num_partitions=dist.get_world_size(), shuffle=False)[dist.get_rank()]


    def main(args):
        dist.init_process_group("nccl")
        device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}")
        torch.cuda.set_device(device)
        transform = Compose([
            LoadImaged(keys=["image", "label"]),
            EnsureChannelFirstd(keys=["image", "label"]),
            {augment}(keys=["image", "label"]{options}),
        ])
        items = [{"image": f"img{i}.nii", "label": f"seg{i}.nii"} for i in range(64)]
        loader = DataLoader(ShardedVolumes(items, transform), batch_size=2, num_workers=0)
        model = DistributedDataParallel(UNet(3, 1, 2, (16, 32), (2,)).to(device), device_ids=[device])
        optimizer = torch.optim.Adam(model.parameters(), 1e-4)
        for epoch in range(args.epochs):
            for batch in loader:
                loss = model(batch["image"].to(device)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--seed", type=int, default=None)
        args = parser.parse_args()
        if args.seed is not None:
            set_determinism(seed={seed})
        main(args)
"""


def _volumes(augment: str = "RandFlipd", options: str = ", prob=0.5", seed: str = "args.seed") -> dict[str, str]:
    return {"train.py": VOLUMES.replace("{augment}", augment).replace("{options}", options).replace("{seed}", seed)}


def test_rank_part_of_a_world_size_split_is_a_share(tmp_path: Path) -> None:
    assert lines(tmp_path, _volumes(), "DDP029") == [("train.py", 49)]


def test_rank_part_with_fixed_transforms_draws_nothing(tmp_path: Path) -> None:
    # `Orientationd` is no random transform.
    files = _volumes("Orientationd", ', axcodes="RAS"')
    assert lines(tmp_path, files, "DDP029") == []


def test_set_determinism_offset_by_the_rank_is_clean(tmp_path: Path) -> None:
    files = _volumes(seed='args.seed + int(os.environ["RANK"])')
    assert lines(tmp_path, files, "DDP029") == []


# A loader factory in another module hands its DataLoader a generator seeded at import.
BUILD = """\
    import random

    import numpy as np
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    {generator}


    def seed_worker(worker_id):
        seed = torch.initial_seed() % 2**32
        np.random.seed(seed)
        random.seed(seed)


    def make_loader(dataset, batch_size, workers):
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                            worker_init_fn=seed_worker, generator={passed})
        return loader, sampler
"""

CROPS = """\
    import os

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from build import make_loader


    class Crops(torch.utils.data.Dataset):
        def __len__(self):
            return 512

        def __getitem__(self, i):
            x = np.random.rand(3, 16, 16).astype("float32")
            return torch.from_numpy(x[:, : np.random.randint(8, 16)]).mean()


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        model = DDP(torch.nn.Linear(1, 1).cuda(rank), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader, sampler = make_loader(Crops(), 8, 4)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for x in loader:
                loss = model(x[:, None].cuda(rank)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
"""


def _loader(generator: str, passed: str = "g") -> dict[str, str]:
    return {"train.py": CROPS, "build.py": BUILD.replace("{generator}", generator).replace("{passed}", passed)}


def test_loader_generator_seeded_alike_at_import(tmp_path: Path) -> None:
    files = _loader("g = torch.Generator()\n    g.manual_seed(0)")
    assert lines(tmp_path, files, "DDP029") == [("build.py", 8)]


def test_loader_generator_seeded_alike_inline(tmp_path: Path) -> None:
    files = _loader("", "torch.Generator().manual_seed(1234)")
    assert lines(tmp_path, files, "DDP029") == [("build.py", 19)]


def test_loader_generator_seeded_with_the_rank_is_clean(tmp_path: Path) -> None:
    files = _loader("", 'torch.Generator().manual_seed(1234 + int(os.environ["RANK"]))')
    files["build.py"] = "    import os\n" + files["build.py"]
    assert lines(tmp_path, files, "DDP029") == []


def test_loader_generator_without_workers_is_clean(tmp_path: Path) -> None:
    # The base seed reaches only worker processes; none is started.
    files = _loader("g = torch.Generator()\n    g.manual_seed(0)")
    files["train.py"] = files["train.py"].replace("make_loader(Crops(), 8, 4)", "make_loader(Crops(), 8, 0)")
    assert lines(tmp_path, files, "DDP029") == []

