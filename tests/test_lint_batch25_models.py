"""Models on the way to the DDP wrap, on mechanisms seen on public scripts of batch 25: a project
function that swaps BatchNorm for GroupNorm before the wrap (DDP012). Each through `ddpcheck
lint` on a small project written in the style of the scripts, with the variants that must stay
as they were."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


NORM_UTILS = """\
    import torch
    import torch.nn as nn


    def to_group_norm(module, groups=32):
        out = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            out = nn.GroupNorm(groups, module.num_features, affine=module.affine)
        for name, child in module.named_children():
            out.add_module(name, to_group_norm(child, groups))
        return out


    def swap_norms(net):
        for name, child in net.named_children():
            if isinstance(child, nn.BatchNorm2d):
                setattr(net, name, nn.GroupNorm(8, child.num_features))
            else:
                swap_norms(child)


    def init_weights(net):
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
"""

NORM_SCRIPT = """\
    import os
    import torch
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
    from norms import to_group_norm, swap_norms, init_weights


    def main():
        torch.distributed.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torchvision.models.resnet18(num_classes=10)
        {convert}
        model = model.cuda(local_rank)
        model = DDP(model, device_ids=[local_rank])
        return model


    if __name__ == "__main__":
        main()
"""


def _norm_project(convert: str) -> dict[str, str]:
    return {"norms.py": NORM_UTILS, "train.py": NORM_SCRIPT.format(convert=convert)}


def test_batchnorm_swapped_for_groupnorm_by_a_project_function_is_not_reported(tmp_path: Path) -> None:
    files = _norm_project("model = to_group_norm(model, groups=32)")
    assert lines(tmp_path, files, "DDP012") == []


def test_batchnorm_swapped_in_place_by_a_project_function_is_not_reported(tmp_path: Path) -> None:
    files = _norm_project("swap_norms(model)")
    assert lines(tmp_path, files, "DDP012") == []


def test_a_weight_init_that_only_tests_for_batchnorm_swaps_nothing(tmp_path: Path) -> None:
    files = _norm_project("init_weights(model)")
    assert lines(tmp_path, files, "DDP012") == [("train.py", 15)]


def test_batchnorm_kept_is_reported(tmp_path: Path) -> None:
    files = _norm_project("pass")
    assert lines(tmp_path, files, "DDP012") == [("train.py", 15)]


# A Dataset holding its own generator, loaded by a project helper that builds the DataLoader;
# the worker count is an option a project helper adds to the script's parser.
RNG_DATA = """\
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset, DistributedSampler


    class PairDataset(Dataset):
        def __init__(self, files, max_offset=3):
            self.files = files
            self.max_offset = max_offset
            self.rng = np.random.default_rng()

        def __len__(self):
            return len(self.files)

        def __getitem__(self, index):
            offset = self.rng.integers(0, self.max_offset, endpoint=True)
            return torch.tensor([index, offset])


    def make_distributed_dataloader(dataset, batch_size, shuffle, num_workers, rank, world_size):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                          num_workers=num_workers, pin_memory=True)
"""

RNG_CLI = """\
    def add_computing_args(parser):
        parser.add_argument("--num_workers", action="store", type=int, default={workers})
        return parser
"""

RNG_SCRIPT = """\
    import argparse
    import torch.distributed as dist
    import cli
    from data import PairDataset, make_distributed_dataloader

    parser = argparse.ArgumentParser()
    parser = cli.add_computing_args(parser=parser)


    def main(args):
        dist.init_process_group("nccl")
        rank, world_size = dist.get_rank(), dist.get_world_size()
        num_workers = args.num_workers
        train_dataset = PairDataset(["a", "b"])
        loader = make_distributed_dataloader(train_dataset, 8, shuffle=True, num_workers=num_workers,
                                             rank=rank, world_size=world_size)
        for batch in loader:
            pass


    if __name__ == "__main__":
        main(parser.parse_args())
"""


def test_dataset_rng_loaded_by_a_project_helper_with_workers_is_reported(tmp_path: Path) -> None:
    files = {"data.py": RNG_DATA, "cli.py": RNG_CLI.format(workers=4), "train.py": RNG_SCRIPT}
    assert lines(tmp_path, files, "DDP028") == [("data.py", 10)]


def test_dataset_rng_loaded_by_a_project_helper_without_workers_is_not_reported(tmp_path: Path) -> None:
    files = {"data.py": RNG_DATA, "cli.py": RNG_CLI.format(workers=0), "train.py": RNG_SCRIPT}
    assert lines(tmp_path, files, "DDP028") == []


def test_dataset_rng_reseeded_by_the_helpers_worker_init_fn_is_not_reported(tmp_path: Path) -> None:
    data = RNG_DATA.replace("num_workers=num_workers, pin_memory=True)",
                            "num_workers=num_workers, worker_init_fn=reseed)")
    files = {"data.py": data, "cli.py": RNG_CLI.format(workers=4), "train.py": RNG_SCRIPT}
    assert lines(tmp_path, files, "DDP028") == []


# A checkpoint helper handed the DDP model moves the wrapped module to the CPU on rank 0.
CKPT_HELPER = """\
    import torch
    import torch.distributed as dist
    import torch.nn as nn


    def save_model_and_optimizer(model, optimizer, epoch, filepath):
        is_ddp = isinstance(model, nn.parallel.DistributedDataParallel)
        save_rank = dist.get_rank() if dist.is_initialized() else 0
        if save_rank == 0:
            if is_ddp:
                model_cpu = {move}
            else:
                model_cpu = model
            checkpoint = {{"epoch": epoch, "model_state_dict": model_cpu.state_dict(),
                          "optimizer_state_dict": optimizer.state_dict()}}
            torch.save(checkpoint, filepath)
        if dist.is_initialized():
            dist.barrier()
"""

CKPT_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from checkpointing import save_model_and_optimizer


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        model = nn.Linear(8, 8).to(device)
        model = {wrap}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(10):
            loss = model(torch.randn(4, 8, device=device)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            save_model_and_optimizer(model, optimizer, epoch, "ckpt.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _ckpt_project(move: str, wrap: str = "DDP(model, device_ids=[local_rank])") -> dict[str, str]:
    return {"checkpointing.py": CKPT_HELPER.format(move=move), "train.py": CKPT_SCRIPT.format(wrap=wrap)}


def test_wrapped_module_moved_to_cpu_by_a_helper_handed_the_wrapper_is_reported(tmp_path: Path) -> None:
    files = _ckpt_project('model.module.to("cpu")')
    assert lines(tmp_path, files, "DDP014") == [("checkpointing.py", 11)]


def test_wrapped_module_state_copied_by_the_helper_is_not_reported(tmp_path: Path) -> None:
    files = _ckpt_project("model.module")
    assert lines(tmp_path, files, "DDP014") == []


def test_wrapped_module_moved_to_its_own_gpu_by_the_helper_is_not_reported(tmp_path: Path) -> None:
    files = _ckpt_project("model.module.to(device)")
    assert lines(tmp_path, files, "DDP014") == []


def test_plain_model_moved_to_cpu_by_the_helper_is_not_reported(tmp_path: Path) -> None:
    files = _ckpt_project('model.module.to("cpu")', wrap="model")
    assert lines(tmp_path, files, "DDP014") == []


# A trainer that takes its parts as `**kwargs` and runs a method of the inner module.
KW_TRAINER = """\
    class MultiTrainer:
        def __init__(self, **kwargs):
            self.net = kwargs["net"]
            self.train_dl = kwargs["train_dl"]
            self.optimizer = kwargs["optimizer"]

        def train(self):
            for imgs, labels in self.train_dl:
                out1, out2 = {forward}
                loss = out1.sum() + out2.sum()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
"""

KW_NETS = """\
    import torch.nn as nn


    class MultiNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x), self.b(x)

        def forward_proxy(self, x):
            return self.a(x), self.b(x)
"""

KW_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from trainer import MultiTrainer
    from nets import MultiNet


    def main(gpu, loader):
        dist.init_process_group("nccl")
        torch.cuda.set_device(gpu)
        net = MultiNet().cuda()
        net = DDP(net, device_ids=[gpu])
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
        trainer = MultiTrainer(net=net, train_dl=loader, optimizer=optimizer)
        for epoch in range(10):
            trainer.train()
"""


def _kw_project(forward: str) -> dict[str, str]:
    return {"trainer.py": KW_TRAINER.format(forward=forward), "nets.py": KW_NETS, "train.py": KW_SCRIPT}


def test_inner_method_of_a_wrapper_handed_through_kwargs_is_reported(tmp_path: Path) -> None:
    files = _kw_project("self.net.module.forward_proxy(imgs.cuda())")
    assert lines(tmp_path, files, "DDP013") == [("trainer.py", 9)]


def test_wrapper_handed_through_kwargs_called_is_not_reported(tmp_path: Path) -> None:
    files = _kw_project("self.net(imgs.cuda())")
    assert lines(tmp_path, files, "DDP013") == []


# A trainer class of a helper module touches CUDA in its constructor and sets
# CUDA_VISIBLE_DEVICES later, in the method that sets up the process group.
CVD_TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, batch_size):
            self.batch_size = batch_size
            self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            self.model = torch.nn.Linear(4, 4)

        def init_ddp(self, rank=0):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
            dist.init_process_group(backend="nccl")
            return dist.get_rank()

        def train(self, epochs):
            {start}
"""

CVD_MAIN = """\
    from trainer import Trainer

    if __name__ == "__main__":
        trainer = Trainer(256)
        trainer.train(60)
"""


def test_cuda_visible_devices_set_after_the_constructor_touched_cuda_is_reported(tmp_path: Path) -> None:
    files = {"trainer.py": CVD_TRAINER.format(start="rank = self.init_ddp()"), "train.py": CVD_MAIN}
    assert lines(tmp_path, files, "DDP032") == [("trainer.py", 16)]


def test_cuda_visible_devices_set_in_a_spawned_method_is_not_reported(tmp_path: Path) -> None:
    files = {"trainer.py": CVD_TRAINER.format(start="mp.spawn(self.init_ddp, nprocs=2)"), "train.py": CVD_MAIN}
    assert lines(tmp_path, files, "DDP032") == []
