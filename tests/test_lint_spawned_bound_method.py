"""A worker started as the bound method of a project object (`trainer = Trainer(cfg)`, then
`mp.spawn(trainer.train, nprocs=n)`): the model follows the spawn into the method, so the rules
that read what each process runs see its setup and its loop. Through `ddpcheck lint` on small
projects in the style of GAN and trainer scripts, with variants that must stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    class ImageGAN:
        def __init__(self, epochs=5):
            self.epochs = epochs

        def train(self, rank):
            self.device = torch.device("cuda:{{}}".format(rank))
            dist.init_process_group(backend="nccl", rank=rank, world_size=torch.cuda.device_count())
            {setup}
            dataset = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
            loader = DataLoader(dataset, batch_size=32, {data})
            model = DDP(torch.nn.Linear(16, 1).to(self.device), device_ids=[rank])
            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(self.epochs):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x.to(self.device)), y.to(self.device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            dist.destroy_process_group()
"""

MAIN = """\
    import os

    import torch

    from gan import ImageGAN


    def main():
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12459"
        {spawn}


    if __name__ == "__main__":
        main()
"""

BOUND = "gan = ImageGAN(epochs=10)\n        torch.multiprocessing.spawn(gan.train, nprocs=torch.cuda.device_count())"
SHARDED = "sampler=DistributedSampler(dataset)"


def project(spawn: str = BOUND, setup: str = "pass", data: str = "shuffle=True") -> dict[str, str]:
    return {"main.py": MAIN.format(spawn=spawn),
            "gan.py": TRAINER.format(setup=setup, data=data)}


def test_a_bound_method_worker_without_set_device_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, project(data=SHARDED), "DDP003", target="main.py") == [("gan.py", 13)]


def test_a_bound_method_worker_that_sets_its_device_is_clean(tmp_path: Path) -> None:
    files = project(setup="torch.cuda.set_device(rank)", data=SHARDED)
    assert lines(tmp_path, files, "DDP003", target="main.py") == []


def test_the_bound_method_of_an_object_built_in_the_call_is_followed(tmp_path: Path) -> None:
    spawn = "torch.multiprocessing.spawn(ImageGAN().train, nprocs=torch.cuda.device_count())"
    assert lines(tmp_path, project(spawn=spawn, data=SHARDED), "DDP003", target="main.py") == [("gan.py", 13)]


def test_a_bound_method_worker_loading_the_whole_dataset_on_every_rank_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, project(setup="torch.cuda.set_device(rank)"), "DDP001", target="main.py") == [("gan.py", 16)]
    sharded = project(setup="torch.cuda.set_device(rank)", data=SHARDED + ", shuffle=False")
    assert lines(tmp_path / "sharded", sharded, "DDP001", target="main.py") == []
