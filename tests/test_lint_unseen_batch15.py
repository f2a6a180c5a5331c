"""Mechanisms seen on batch 15's development half (after its first run): each through
`ddpcheck lint` on a small project written in the style of the scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

PHASE_DICT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def train_model(model, dataloaders, optimizer, epochs):
        for epoch in range(epochs):
            for phase in ["train", "val"]:
                model.train(phase == "train")
                for x, y in dataloaders[phase]:
                    optimizer.zero_grad()
                    with torch.set_grad_enabled(phase == "train"):
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                        if phase == "train":
                            loss.backward()
                            optimizer.step()


    def main(datasets):
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(8, 2).cuda())
        dataloaders = {{
            "train": DataLoader(datasets["train"], batch_size=32, {train_loader}),
            "val": DataLoader(datasets["val"], batch_size=32),
        }}
        train_model(model, dataloaders, torch.optim.SGD(model.parameters(), lr=0.1), 10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(load())
"""


def test_the_val_entry_of_a_loader_dict_is_an_evaluation_loader(tmp_path: Path) -> None:
    text = PHASE_DICT.format(train_loader='sampler=DistributedSampler(datasets["train"])')
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP001") == []


def test_the_train_entry_of_a_loader_dict_without_a_sampler_is_reported(tmp_path: Path) -> None:
    text = PHASE_DICT.format(train_loader="shuffle=True")
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP001")] == [25]


BY_DEVICE = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(args, model, loader, optimizer):
        if args.device == "cuda":
            model = torch.nn.DataParallel(model.cuda())
        else:
            model = DDP(model)
        for epoch in range(args.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            if args.device == {saving_device}:
                torch.save(model.state_dict(), f"ckpt_{{epoch}}.pt")


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
        parser.add_argument("--epochs", type=int, default=10)
        args = parser.parse_args()
        if args.device == "cpu":
            dist.init_process_group(backend="gloo")
        train(args, build_model(), build_loader(), build_optimizer())
        if args.device == "cpu":
            dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_save_on_the_setting_that_never_sets_up_a_process_group_is_one_process(tmp_path: Path) -> None:
    text = BY_DEVICE.format(saving_device='"cuda"')
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP010") == []


def test_a_save_on_the_setting_that_sets_up_the_process_group_runs_on_every_rank(tmp_path: Path) -> None:
    text = BY_DEVICE.format(saving_device='"cpu"')
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP010")] == [19]


RANK0_PREVIEW = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rank, loader, val_loader, max_val_steps):
        dist.init_process_group("nccl")
        net = DDP(torch.nn.Linear(8, 8).to(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(net.parameters())
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            torch.nn.functional.l1_loss(net(x.to(rank)), y.to(rank)).backward()
            optimizer.step()
            {guard}
                for vx, vy in val_loader:
                    out = net(vx.to(rank))
                    if torch.isnan(out).any():
                        break
        dist.destroy_process_group()
"""


def test_a_break_out_of_a_loop_only_rank_0_runs_strands_nobody(tmp_path: Path) -> None:
    text = RANK0_PREVIEW.format(guard="if rank == 0 and step % 100 == 0:")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP035") == []


def test_the_same_break_in_a_loop_every_rank_runs_is_reported(tmp_path: Path) -> None:
    text = RANK0_PREVIEW.format(guard="if step % 100 == 0:")
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP035")] == [18]


PROBE_TRAINER = """\
    import torch


    def encode(loader, net):
        feats = []
        with torch.no_grad():
            for x, y in enumerate(loader):
                feats.append((net(x), y))
        return feats


    class Trainer:
        def __init__(self, net, optimizer, trainloader, probeloader):
            self.net = net
            self.optimizer = optimizer
            self.trainloader = trainloader
            self.probeloader = probeloader

        def train(self):
            for x, _ in self.trainloader:
                self.optimizer.zero_grad()
                self.net(x).pow(2).mean().backward()
                self.optimizer.step()

        def probe(self):
            return encode(self.probeloader, self.net)
"""

PROBE_SCRIPT = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from trainer import Trainer


    def main(trainset, probeset):
        dist.init_process_group("nccl")
        net = DDP(torch.nn.Linear(8, 8).cuda())
        trainloader = DataLoader(trainset, batch_size=32, {train_loader})
        probetrainloader = DataLoader(probeset, batch_size=32, shuffle=False)
        trainer = Trainer(net, torch.optim.Adam(net.parameters()), trainloader, probetrainloader)
        for epoch in range(10):
            trainer.train()
            trainer.probe()
        dist.destroy_process_group()
"""


def test_a_loader_only_read_to_encode_features_without_backward_is_not_a_training_loader(tmp_path: Path) -> None:
    files = {"trainer.py": PROBE_TRAINER,
             "train.py": PROBE_SCRIPT.format(train_loader="sampler=DistributedSampler(trainset)")}
    assert lint_project(tmp_path, files, "train.py", select="DDP001") == []


def test_the_loader_the_training_loop_reads_without_a_sampler_is_reported(tmp_path: Path) -> None:
    files = {"trainer.py": PROBE_TRAINER, "train.py": PROBE_SCRIPT.format(train_loader="shuffle=True")}
    assert [f["location"]["line"] for f in lint_project(tmp_path, files, "train.py", select="DDP001")] == [11]


OPTIONAL_CAP = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def average_loss(loader, model, num_batches=None):
        total, seen = 0.0, 0
        {bound}
        with torch.no_grad():
            for i, (x, y) in enumerate(loader):
                if i >= limit:
                    break
                loss = torch.nn.functional.mse_loss(model(x), y)
                dist.all_reduce(loss)
                total += loss.item() / dist.get_world_size()
                seen += 1
        return total / seen


    def main(train_set, val_set):
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(8, 8).cuda())
        optimizer = torch.optim.AdamW(model.parameters())
        train_loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set, drop_last=True))
        val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))
        for epoch in range(3):
            train_loader.sampler.set_epoch(epoch)
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            print(average_loss(val_loader, model))
        dist.destroy_process_group()
"""


def test_an_evaluation_capped_only_when_asked_runs_over_the_padded_shard(tmp_path: Path) -> None:
    # The validation call passes no cap: the loop runs over the whole padded shard.
    text = OPTIONAL_CAP.format(bound="limit = len(loader)\n        if num_batches is not None:\n"
                                     "            limit = min(num_batches, len(loader))")
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP018")] == [28]


def test_an_evaluation_always_capped_to_a_few_batches_is_an_estimate(tmp_path: Path) -> None:
    text = OPTIONAL_CAP.format(bound="limit = num_batches or 20")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP018") == []


SHORT_NAMES = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def run(rank, world_size, tr_dataset, te_dataset):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        tr_sampler = DistributedSampler(tr_dataset, num_replicas=world_size, rank=rank, shuffle=True)
        te_sampler = DistributedSampler(te_dataset, num_replicas=world_size, rank=rank, shuffle=True)
        tr_loader = DataLoader(tr_dataset, batch_size=64, sampler=tr_sampler)
        te_loader = DataLoader(te_dataset, batch_size=64, sampler=te_sampler)
        model = DDP(torch.nn.Linear(8, 4).to(rank), device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            tr_sampler.set_epoch(epoch)
            for x, y in tr_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x.to(rank)), y.to(rank)).backward()
                optimizer.step()
            correct, total = 0, 0
            {evaluation}
                for x, y in te_loader:
                    correct += (model(x.to(rank)).argmax(1) == y.to(rank)).sum().item()
                    total += y.size(0)
            acc = torch.tensor(correct / total, device=rank)
            dist.all_reduce(acc)
            print(acc.item() / world_size)
        dist.destroy_process_group()
"""


def test_a_sampler_whose_loader_is_read_only_without_gradients_is_an_evaluation_sampler(tmp_path: Path) -> None:
    text = SHORT_NAMES.format(evaluation="with torch.no_grad():")
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP018")] == [10]


def test_a_sampler_whose_loader_is_read_with_gradients_on_is_not_judged_an_evaluation(tmp_path: Path) -> None:
    text = SHORT_NAMES.format(evaluation="if True:")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP018") == []


DROP_FLAG = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--drop-last", action="store_true"{default})
        args = parser.parse_args()
        dist.init_process_group("nccl")
        train_set, val_set = load()
        train_loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False,
                                                                                   drop_last=args.drop_last))
        model = DDP(torch.nn.Linear(8, 2).cuda())
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(5):
            train_loader.sampler.set_epoch(epoch)
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            with torch.no_grad():
                acc = torch.stack([(model(x).argmax(1) == y).float().mean() for x, y in val_loader]).mean()
            dist.all_reduce(acc)
            print(acc.item() / dist.get_world_size())
        dist.destroy_process_group()
"""


def test_drop_last_from_a_flag_left_off_by_default_pads(tmp_path: Path) -> None:
    text = DROP_FLAG.format(default="")
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP018")] == [16]


def test_drop_last_from_a_flag_on_by_default_does_not_pad(tmp_path: Path) -> None:
    text = DROP_FLAG.format(default=", default=True")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP018") == []


LATE_DEVICE = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel


    def learning(ddp_model, device, loader, epochs):
        torch.cuda.set_device(device)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(ddp_model(x.cuda()), y.cuda()).backward()
                optimizer.step()


    def main():
        dist.init_process_group("nccl")
        device_id = int(os.environ["LOCAL_RANK"])
        criterion = nn.CrossEntropyLoss().cuda()
        {early}
        model = nn.Linear(8, 2).cuda(device_id)
        ddp_model = DistributedDataParallel(model, device_ids=[device_id])
        learning(ddp_model, device_id, build_loader(), 10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_set_device_only_after_the_model_went_to_the_gpu_is_too_late(tmp_path: Path) -> None:
    text = LATE_DEVICE.format(early="")
    found = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP003")
    assert [f["location"]["line"] for f in found] == [20]
    assert "runs only after CUDA work (`nn.Linear(8, 2).cuda(device_id)`)" in found[0]["message"]


def test_set_device_before_the_first_cuda_work_is_in_time(tmp_path: Path) -> None:
    # (The loss module moved first holds no tensor: moving it is no CUDA work.)
    text = LATE_DEVICE.format(early="torch.cuda.set_device(device_id)")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP003") == []


BOTH_ARMS = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(gpu, ngpus):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", world_size=ngpus, rank=gpu)
        torch.cuda.set_device(gpu)
        model = DDP(torch.nn.Linear(8, 8).cuda(gpu), device_ids=[gpu])
        train(model)
        if gpu == 0:
            inner = model.module
            dist.destroy_process_group()
            validate(inner)
        {other_arm}


    if __name__ == "__main__":
        mp.spawn(worker, nprocs=torch.cuda.device_count(), args=(torch.cuda.device_count(),))
"""


def test_a_teardown_under_each_arm_of_a_rank_test_runs_on_every_rank(tmp_path: Path) -> None:
    text = BOTH_ARMS.format(other_arm="else:\n            dist.destroy_process_group()")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP005") == []


def test_a_teardown_on_rank_0_alone_is_still_reported(tmp_path: Path) -> None:
    text = BOTH_ARMS.format(other_arm="")
    assert [f["location"]["line"] for f in lint_project(tmp_path, {"train.py": text}, "train.py",
                                                        select="DDP005")] == [8]


THREE_WAYS = """\
    import argparse

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    try:
        import deepspeed
    except ImportError:
        deepspeed = None


    def train_deepspeed(args, dataset):
        deepspeed.init_distributed()
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        engine, _, _, _ = deepspeed.initialize(args=args, model=build(), model_parameters=build().parameters())
        for step, x in enumerate(loader):
            loss = engine(x).mean()
            engine.backward(loss)
            if (step + 1) % 4 == 0:
                engine.step()


    def train_ddp(rank, world_size, dataset):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        model = DDP(build().cuda(rank), device_ids=[rank])
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(5):
            sampler.set_epoch(epoch)
            for x in loader:
                optimizer.zero_grad()
                model(x.cuda(rank)).mean().backward()
                optimizer.step()
        dist.destroy_process_group()


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--deepspeed", action="store_true")
        parser.add_argument("--ddp", action="store_true")
        args = parser.parse_args()
        dataset = load()
        if args.deepspeed:
            train_deepspeed(args, dataset)
            return
        if args.ddp:
            world_size = torch.cuda.device_count()
            if world_size > 1:
                mp.spawn(train_ddp, args=(world_size, dataset), nprocs=world_size)
                return
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        single(loader)


    if __name__ == "__main__":
        main()
"""


def test_loaders_of_another_engine_and_of_the_spawning_process_are_not_ddp_loaders(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": THREE_WAYS}, "train.py", select="DDP001,DDP016")
    assert found == []


def test_the_ddp_workers_loader_without_a_sampler_is_still_reported(tmp_path: Path) -> None:
    text = THREE_WAYS.replace("batch_size=32, sampler=sampler)", "batch_size=32, shuffle=True)")
    found = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP001,DDP016")
    assert [(f["code"], f["location"]["line"]) for f in found] == [("DDP001", 30)]



NESTED_SETTER = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def set_model(gpu):
        torch.cuda.set_device(gpu)
        return torch.nn.Linear(8, 8).cuda(gpu)


    def single():
        model = set_model(0)
        train(model)


    def worker(gpu, ngpus):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", world_size=ngpus, rank=gpu)
        dist.barrier()
        {early}
        model = DDP(set_model(gpu), device_ids=[gpu])
        train(model)
        dist.destroy_process_group()


    if __name__ == "__main__":
        n = torch.cuda.device_count()
        if n <= 1:
            single()
        else:
            mp.spawn(worker, nprocs=n, args=(n,))
"""


def test_a_barrier_and_the_wrap_of_what_the_setter_returns_come_before_no_cuda_work(tmp_path: Path) -> None:
    # NCCL runs a barrier before any device is used on `rank % device_count`: the right GPU on
    # one machine. The DDP wrap runs after the `set_model(gpu)` it is handed.
    text = NESTED_SETTER.format(early="")
    assert lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP003") == []


def test_a_tensor_made_on_the_gpu_before_the_setter_in_a_worker_is_reported(tmp_path: Path) -> None:
    # (`single()` calls the setter too, on the path with no process group: it does not count.)
    text = NESTED_SETTER.format(early='warm = torch.zeros(1, device="cuda")')
    found = lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP003")
    assert [f["location"]["line"] for f in found] == [18]
