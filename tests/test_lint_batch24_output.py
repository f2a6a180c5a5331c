"""Who writes and prints (DDP010, DDP020, DDP009, DDP019): mechanisms seen on public scripts of
batch 24, each through `ddpcheck lint` on a small project written in the style of the scripts,
with the variant that must stay silent (or must still be reported)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A worker that `mp.spawn` starts (its first parameter is the process index, the local rank) and
# that the same script also calls plainly when it is not distributed. It hands the index on by
# keyword as `device=gpu`; the epoch function saves and prints under `device == 0 or not
# args.distributed`: one writer per node.
SPAWN_INDEX_SCRIPT = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run_epoch(loader, model, optimizer, epoch, device, args):
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        {guard}
            torch.save(model.state_dict(), os.path.join(args.out, "last.pth"))
            print("epoch", epoch, "done")


    def main_worker(gpu, args):
        if args.distributed:
            dist.init_process_group("nccl", rank=args.nr * args.gpus + gpu, world_size=args.world_size)
            torch.cuda.set_device(gpu)
        model = torch.nn.Linear(8, 2).to(gpu)
        if args.distributed:
            model = DDP(model, device_ids=[gpu])
        optimizer = torch.optim.Adam(model.parameters(), args.lr)
        sampler = torch.utils.data.distributed.DistributedSampler(list(range(64))) if args.distributed else None
        loader = torch.utils.data.DataLoader(list(range(64)), batch_size=8, sampler=sampler)
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            run_epoch(loader=loader, model=model, optimizer=optimizer, epoch=epoch, device=gpu, args=args)
        if args.distributed:
            dist.destroy_process_group()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--out", default="out")
        parser.add_argument("--lr", type=float, default=1e-3)
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--gpus", type=int, default=0)
        parser.add_argument("--nodes", type=int, default=1)
        parser.add_argument("--nr", type=int, default=0)
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        if args.distributed:
            ngpus = torch.cuda.device_count()
            args.world_size = ngpus * args.nodes
            mp.spawn(main_worker, nprocs=ngpus, args=(args,), join=True)
        else:
            main_worker(args.gpus, args)
"""


def test_spawn_index_guard_beside_a_plain_call_is_clean(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_INDEX_SCRIPT.format(guard="if device == 0 or not args.distributed:")}
    assert lines(tmp_path, files, "DDP010,DDP020") == []


def test_unguarded_save_in_spawned_worker_is_still_reported(tmp_path: Path) -> None:
    files = {"train.py": SPAWN_INDEX_SCRIPT.format(guard="if epoch % 2 == 0:")}
    assert lines(tmp_path, files, "DDP010,DDP020") == [("train.py", 18), ("train.py", 19)]


# A trainer class whose validation wraps `enumerate(self.valid_loader)` in a progress bar with
# no `disable=`; the loader is built elsewhere (the trainer does not see a DataLoader), but the
# loop runs the model the trainer holds, `self.model(data)`, on its items.
VALID_BAR_TRAINER = """\
    import torch
    from tqdm import tqdm


    class Trainer:
        def __init__(self, model, optimizer, device, data_loader, valid_loader):
            self.model = model
            self.optimizer = optimizer
            self.device = device
            self.data_loader = data_loader
            self.valid_loader = valid_loader

        def train_epoch(self, epoch):
            self.model.train()
            for data, target in self.data_loader:
                data, target = data.to(self.device), target.to(self.device)
                self.optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.model(data), target)
                loss.backward()
                self.optimizer.step()
            return self.valid_epoch(epoch)

        def valid_epoch(self, epoch):
            self.model.eval()
            outputs = []
            with torch.no_grad():
                for idx, (data, target) in tqdm(enumerate(self.valid_loader){bar_args}):
                    data = data.to(self.device)
                    {body}
            return outputs
"""

VALID_BAR_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from trainer import Trainer


    def main(loaders):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
        trainer = Trainer(model, optimizer, local_rank, loaders["train"], loaders["valid"])
        for epoch in range(10):
            trainer.train_epoch(epoch)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(torch.load("loaders.pt"))
"""


def test_bar_over_a_validation_loop_of_the_held_model_is_reported(tmp_path: Path) -> None:
    files = {"trainer.py": VALID_BAR_TRAINER.format(bar_args="", body="outputs.append(self.model(data))"),
             "train.py": VALID_BAR_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == [("trainer.py", 27)]


def test_bar_over_a_validation_loop_disabled_off_rank_zero_is_clean(tmp_path: Path) -> None:
    files = {"trainer.py": VALID_BAR_TRAINER.format(bar_args=", disable=dist.get_rank() != 0",
                                                    body="outputs.append(self.model(data))").replace(
                 "import torch\n", "import torch\n    import torch.distributed as dist\n", 1),
             "train.py": VALID_BAR_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == []


# A rank-0 save of the DDP wrapper's state dict, bare, as `best.pth`; the resume loads an entry of
# another checkpoint (`ckpt["model_state_dict"]`) into the wrapper. The bare file has no such
# entry: the resume is not what reads it back.
BEST_SAVE_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), 1e-3)
        resume = os.environ["RESUME"]
        if os.path.exists(resume):
            checkpoint = torch.load(resume, map_location="cpu")
            model.load_state_dict({loaded})
        best = 0.0
        for epoch in range(10):
            score = float(torch.rand(1))
            if dist.get_rank() == 0 and score > best:
                best = score
                torch.save(model.state_dict(), "best.pth")
            if dist.get_rank() == 0:
                torch.save({{"model_state_dict": model.module.state_dict()}}, "last.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_bare_state_dict_beside_a_resume_that_reads_an_entry_is_reported(tmp_path: Path) -> None:
    files = {"train.py": BEST_SAVE_SCRIPT.format(loaded='checkpoint["model_state_dict"]')}
    assert lines(tmp_path, files, "DDP019") == [("train.py", 22)]


def test_bare_state_dict_beside_a_resume_of_the_whole_file_is_clean(tmp_path: Path) -> None:
    # The resume loads what it read as a whole: it may read `best.pth` back into the wrapper.
    files = {"train.py": BEST_SAVE_SCRIPT.format(loaded="checkpoint")}
    assert lines(tmp_path, files, "DDP019") == []


# A clustering step under `if is_master or not computed:` with `computed` a flag the loop sets
# False, then True once the features are on disk: every rank takes the branch the first time
# round (its gather runs everywhere), rank 0 alone afterwards, reading the saved file.
PROGRESS_FLAG_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist


    def features(model, loader, load_saved):
        if load_saved:
            return torch.load("features.pt")
        out = torch.cat([model(x) for x in loader])
        gathered = [torch.zeros_like(out) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, out)
        return torch.cat(gathered)


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        is_master = dist.get_rank() == 0
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        loader = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=8)
        computed = False
        for epoch in range(10):
            if is_master or not {flag}:
                feats = features(model, loader, load_saved=computed)
            if is_master:
                torch.save(feats, "features.pt")
            computed = True
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(None)
"""


def test_rank_test_or_a_flag_flipped_by_the_loop_is_no_rank_branch(tmp_path: Path) -> None:
    files = {"train.py": PROGRESS_FLAG_SCRIPT.format(flag="computed")}
    assert lines(tmp_path, files, "DDP009") == []


def test_rank_test_or_not_distributed_is_still_a_rank_branch(tmp_path: Path) -> None:
    files = {"train.py": PROGRESS_FLAG_SCRIPT.format(flag="dist.is_initialized()")}
    assert lines(tmp_path, files, "DDP009") == [("train.py", 25)]


# A harness method, called at each pruning level, that prints and sets the instance's scheduler:
# a guard around the call would leave the other ranks without one, so the print is the place.
LEVELS_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist


    class Harness:
        def __init__(self, model, loader, lr):
            self.model = model
            self.loader = loader
            self.lr = lr
            self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            self.scheduler = None

        def _setup_scheduler(self, epochs):
            print(f"setting up a scheduler for {{epochs}} epochs")
            {body}

        def train_level(self, epochs):
            self._setup_scheduler(epochs)
            for epoch in range(epochs):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    torch.nn.functional.mse_loss(self.model(x), y).backward()
                    self.optimizer.step()
                    if self.scheduler is not None:
                        self.scheduler.step()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 2)),
                                             sampler=torch.utils.data.distributed.DistributedSampler(range(64)))
        harness = Harness(model, loader, float(os.environ["LR"]))
        for level in range(5):
            harness.train_level(10)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_print_in_a_method_that_sets_the_instance_state_is_reported_at_the_print(tmp_path: Path) -> None:
    body = "self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, epochs)"
    assert lines(tmp_path, {"train.py": LEVELS_SCRIPT.format(body=body)}, "DDP020") == [("train.py", 15)]


def test_print_in_a_method_that_only_prints_is_reported_at_the_call(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": LEVELS_SCRIPT.format(body="return None")}, "DDP020") == [("train.py", 19)]
