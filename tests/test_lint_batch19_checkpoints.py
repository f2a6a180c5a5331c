"""Checkpoints and evaluation samplers seen on public scripts around batch 19: each through
`ddpcheck lint` on a small project written in the style of the scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def found(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in lint_project(tmp_path, files, target, select=select))


# --- DDP019: a checkpoint dict filled entry by entry -----------------------------------------

GAN_SCRIPT = """\
    import torch
    import torch.multiprocessing as mp
    from train_func import train

    def main_worker(rank, world_size):
        torch.distributed.init_process_group("nccl", rank=rank, world_size=world_size,
                                             init_method="tcp://127.0.0.1:12355")
        G_AB = torch.nn.Linear(4, 4).to(rank)
        G_AB = torch.nn.parallel.DistributedDataParallel(G_AB, device_ids=[rank])
        D_A = torch.nn.Linear(4, 1).to(rank)
        D_A = torch.nn.parallel.DistributedDataParallel(D_A, device_ids=[rank])
        train(args, G_AB, D_A)
        torch.distributed.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main_worker, nprocs=torch.cuda.device_count(), args=(torch.cuda.device_count(),))
"""

GAN_TRAIN = """\
    import torch

    def train(args, G_AB, D_A):
        for epoch in range(args.epochs):
            if (epoch + 1) % args.save_per_epochs == 0:
                path = args.model_save_path.replace(".pth", "_" + str(epoch + 1) + "epochs.pth")
                if args.multi_gpu_flag == True:
                    model_dict = {}
                    model_dict["D_A"] = D_A.module.state_dict()
                    model_dict["G_AB"] = G_AB.module.state_dict()
                    torch.save(model_dict, path)
                else:
                    model_dict = {}
                    model_dict["D_A"] = D_A.{inner}state_dict()
                    model_dict["G_AB"] = G_AB.{inner}state_dict()
                    torch.save(model_dict, path)
"""


def test_a_checkpoint_dict_filled_entry_by_entry_saves_what_the_entries_hold(tmp_path: Path) -> None:
    # The wrap does not depend on the flag: its other arm saves the wrappers' `module.` keys.
    files = {"train.py": GAN_SCRIPT, "train_func.py": GAN_TRAIN.replace("{inner}", "")}
    assert found(tmp_path, files, "DDP019") == [("train_func.py", 14), ("train_func.py", 15)]


def test_a_checkpoint_dict_of_inner_modules_is_silent(tmp_path: Path) -> None:
    files = {"train.py": GAN_SCRIPT, "train_func.py": GAN_TRAIN.replace("{inner}", "module.")}
    assert found(tmp_path, files, "DDP019") == []


def test_an_entry_written_after_the_save_or_into_a_new_dict_is_not_saved(tmp_path: Path) -> None:
    script = """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
        ckpt = {}
        ckpt["model"] = model.state_dict()
        ckpt = {"model": model.module.state_dict()}
        torch.save(ckpt, "a.pth")
        state = {"epoch": 1}
        torch.save(state, "b.pth")
        state["model"] = model.state_dict()
    """
    assert found(tmp_path, {"train.py": script}, "DDP019") == []


# --- DDP019: the state dict of torch.compile(DDP(model)) --------------------------------------

COMPILED_TRAINER = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Trainer:
        def __init__(self, loader, model, optimizer):
            self.rank = int(os.environ["RANK"])
            self.model = model.to(f"cuda:{self.rank}")
            self.model = DDP(self.model)
            self.model = torch.compile(self.model)
            self.loader, self.optimizer = loader, optimizer

        def train(self):
            for step, (x, y) in enumerate(self.loader):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                if step % 1000 == 0 and self.rank == 0:
                    torch.save(self.model.{inner}state_dict(), f"saved/{step}.pt")
"""

COMPILED_MAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from trainer import Trainer

    def main(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        model = torch.nn.Linear(4, 4)
        Trainer(loader, model, torch.optim.AdamW(model.parameters())).train()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main, nprocs=2, args=(2,))
"""


def test_the_compiled_ddp_model_saves_the_wrappers_prefix_too(tmp_path: Path) -> None:
    # `_orig_mod.module.` keys: DDP024 names the compile's part, DDP019 the wrapper's.
    files = {"train.py": COMPILED_MAIN, "trainer.py": COMPILED_TRAINER.replace("{inner}", "")}
    assert found(tmp_path, files, "DDP019,DDP024") == [("trainer.py", 20), ("trainer.py", 20)]


def test_the_compiled_ddp_models_inner_module_is_silent(tmp_path: Path) -> None:
    files = {"train.py": COMPILED_MAIN, "trainer.py": COMPILED_TRAINER.replace("{inner}", "module.")}
    assert found(tmp_path, files, "DDP019,DDP024") == []


def test_a_loader_that_strips_the_compiled_wrappers_prefix_is_silent(tmp_path: Path) -> None:
    files = {"train.py": COMPILED_MAIN, "trainer.py": COMPILED_TRAINER.replace("{inner}", ""), "export.py": """\
        import sys
        import torch
        net = torch.nn.Linear(4, 4)
        sd = torch.load(sys.argv[1], map_location="cpu")
        net.load_state_dict({k.replace("_orig_mod.module.", ""): v for k, v in sd.items()})
    """}
    assert found(tmp_path, files, "DDP019") == []


def test_a_tool_that_strips_the_prefix_through_a_helper_of_another_module_is_silent(tmp_path: Path) -> None:
    # The inference script names no prefix itself: the helper it calls from util.py does.
    files = {"train.py": COMPILED_MAIN, "trainer.py": COMPILED_TRAINER.replace("{inner}", ""),
             "util.py": """\
        def strip_state_prefix(state_dict, prefix="_orig_mod.module."):
            return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}
    """, "infer.py": """\
        import sys
        import torch
        from util import strip_state_prefix
        net = torch.nn.Linear(4, 4)
        net.load_state_dict(strip_state_prefix(torch.load(sys.argv[1], map_location="cpu")))
    """}
    assert found(tmp_path, files, "DDP019") == []
    files["util.py"] = files["util.py"].replace("_orig_mod.module.", "layer.")
    assert found(tmp_path, files, "DDP019") == [("trainer.py", 20)]


# --- DDP019: a resume into the wrapper reads one file; another file is never read back ------

RESUMING_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from checkpoint import save_checkpoint, resume

    def main_worker(gpu, ngpus, args):
        dist.init_process_group("nccl", init_method=args.dist_url, world_size=ngpus, rank=gpu)
        torch.cuda.set_device(gpu)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        begin_epoch, best_acc1 = 0, 0.0
        if args.resume:
            begin_epoch, model, optimizer, best_acc1 = resume({resume_args})
        for epoch in range(begin_epoch, args.epochs):
            acc1 = train_and_validate(model, optimizer)
            if best_acc1 < acc1:
                best_acc1 = acc1
                torch.save(model.state_dict(), os.path.join(args.result_path, "{best}"))
            save_checkpoint(args.result_path, epoch, model, optimizer, best_acc1)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main_worker, nprocs=torch.cuda.device_count(), args=(torch.cuda.device_count(), args))
"""

CHECKPOINT_HELPERS = """\
    import os
    import torch

    def save_checkpoint(result_path, epoch, model, optimizer, best_acc1):
        states = {"epoch": epoch, "state_dict": model.state_dict(),
                  "optimizer": optimizer.state_dict(), "best_acc1": best_acc1}
        torch.save(states, os.path.join(result_path, "checkpoint.pth"))

    def resume(result_path, model, optimizer):
        resume_path = {path}
        checkpoint = torch.load(resume_path, map_location=lambda storage, loc: storage)
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        return checkpoint["epoch"], model, optimizer, checkpoint["best_acc1"]
"""


def resuming(best: str = "best_acc1_model.prm", path: str = 'os.path.join(result_path, "checkpoint.pth")',
             resume_args: str = "args.result_path, model, optimizer") -> dict[str, str]:
    return {"train.py": RESUMING_SCRIPT.replace("{best}", best).replace("{resume_args}", resume_args),
            "checkpoint.py": CHECKPOINT_HELPERS.replace("{path}", path)}


def test_a_file_the_resume_into_the_wrapper_never_reads_is_reported(tmp_path: Path) -> None:
    # checkpoint.pth round-trips through the wrapper; best_acc1_model.prm is read by nothing.
    assert found(tmp_path, resuming(), "DDP019") == [("train.py", 19)]


def test_the_file_the_resume_reads_is_silent(tmp_path: Path) -> None:
    assert found(tmp_path, resuming(best="checkpoint.pth"), "DDP019") == []


def test_a_resume_from_a_path_it_does_not_spell_covers_every_file(tmp_path: Path) -> None:
    # `args.resume` may name any file the run saves: unknown, so silent.
    files = resuming(path="args_resume", resume_args="args.result_path, model, optimizer")
    files["checkpoint.py"] = files["checkpoint.py"].replace("def resume(result_path, model, optimizer):",
                                                            "def resume(args_resume, model, optimizer):")
    assert found(tmp_path, files, "DDP019") == []


def test_a_file_name_with_a_replacement_field_matches_the_one_it_may_spell(tmp_path: Path) -> None:
    script = """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
        start = args.start_epoch
        if start > 0:
            model.load_state_dict(torch.load(f"ckpt/epoch_{start}.pth", map_location="cpu"))
        for epoch in range(start, 10):
            train(model)
            torch.save(model.state_dict(), "ckpt/epoch_{}.pth".format(epoch))
    """
    assert found(tmp_path, {"train.py": script}, "DDP019") == []


def test_a_checkpoint_also_copied_to_a_best_file_is_read_back_through_the_file_the_resume_reads(
        tmp_path: Path) -> None:
    # One checkpoint, saved as latest.pth (which the resume reads into the wrapper) and as
    # best.pth: the state dict round-trips.
    script = """\
        import os
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
        if os.path.exists(os.path.join(save_path, "latest.pth")):
            model.load_state_dict(torch.load(os.path.join(save_path, "latest.pth"))["model"])
        for epoch in range(10):
            miou = train_and_evaluate(model)
            checkpoint = {"model": model.state_dict(), "epoch": epoch}
            torch.save(checkpoint, os.path.join(save_path, "latest.pth"))
            if miou > best:
                torch.save(checkpoint, os.path.join(save_path, "best.pth"))
    """
    assert found(tmp_path, {"train.py": script}, "DDP019") == []


# --- DDP010 / DDP018: a module of a plain folder imported by the script above it -------------

RUN_LONG = """\
    import argparse
    import torch
    import torch.distributed as dist
    from exp.exp_main import Exp_Main

    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--use_multi_gpu", action="store_true", default=False)
        args = parser.parse_args()
        args.ddp = args.use_multi_gpu
        if args.ddp:
            dist.init_process_group(backend="nccl")
            torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
        Exp_Main(args).train()
        if args.ddp:
            dist.destroy_process_group()
"""

EXP_MAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from data_provider.data_factory import data_provider
    from utils.tools import EarlyStopping


    class Exp_Main(object):
        def __init__(self, args):
            self.args = args
            self.device = dist.get_rank() % torch.cuda.device_count() if args.ddp else 0
            self.path = "checkpoints"

        def _get_data(self, flag):
            data_set, data_loader = data_provider(self.args, flag, self.args.ddp)
            return data_set, data_loader

        def train(self):
            _, train_loader = self._get_data(flag="train")
            vali_data, vali_loader = self._get_data(flag="val")
            self.model = torch.nn.Linear(4, 4).to(self.device)
            optimizer = torch.optim.Adam(self.model.parameters())
            if self.args.ddp:
                self.model = DDP(self.model, device_ids=[self.device])
            early_stopping = EarlyStopping(patience=3)
            for epoch in range(10):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    torch.nn.functional.mse_loss(self.model(x), y).backward()
                    optimizer.step()
                vali_loss = self.vali(vali_loader)
                early_stopping(vali_loss, self.model.module if self.args.ddp else self.model, self.path)
                if early_stopping.early_stop:
                    break

        def vali(self, vali_loader):
            total, count = torch.tensor(0.0).to(self.device), 0
            with torch.no_grad():
                for x, y in vali_loader:
                    total += torch.nn.functional.mse_loss(self.model(x), y).item() * len(y)
                    count += len(y)
            if self.args.ddp:
                dist.all_reduce(total, op=dist.ReduceOp.SUM)
                counted = torch.tensor(count).to(self.device)
                dist.all_reduce(counted, op=dist.ReduceOp.SUM)
                count = counted.item()
            return (total / count).item()
"""

TOOLS = """\
    import numpy as np
    import torch


    class EarlyStopping:
        def __init__(self, patience=7):
            self.patience, self.counter, self.best_score, self.early_stop = patience, 0, None, False

        def __call__(self, val_loss, model, path):
            score = -val_loss
            if self.best_score is None or score > self.best_score:
                self.best_score = score
                self.save_checkpoint(model, path)
            else:
                self.counter += 1
                self.early_stop = self.counter >= self.patience

        def save_checkpoint(self, model, path):
            {guard}torch.save(model.state_dict(), path + "/" + "checkpoint.pth")
"""

DATA_FACTORY = """\
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def data_provider(args, flag, ddp=False):
        if flag == "test":
            shuffle_flag = False
        else:
            shuffle_flag = True
        data_set = make_dataset(args, flag)
        if ddp and flag != "test":
            if flag == "train":
                sampler = DistributedSampler(data_set, shuffle=True)
            else:
                sampler = DistributedSampler(data_set, shuffle=False)
        else:
            sampler = None
        data_loader = DataLoader(data_set, batch_size=32, shuffle=False if ddp else shuffle_flag,
                                 drop_last=True, sampler=sampler)
        return data_set, data_loader
"""


def exp_project(guard: str = "", run: str = RUN_LONG) -> dict[str, str]:
    return {"run_longExp.py": run, "exp/exp_main.py": EXP_MAIN, "utils/tools.py": TOOLS.replace("{guard}", guard),
            "data_provider/data_factory.py": DATA_FACTORY}


def test_modules_a_plain_folders_module_imports_from_the_scripts_folder_are_read(tmp_path: Path) -> None:
    # exp/exp_main.py runs with run_longExp.py's folder on sys.path: its `utils.tools` and
    # `data_provider.data_factory` are the project's. Every rank saves checkpoint.pth; the
    # validation arm of the builder pads its sampler and the loss sums are all-reduced.
    assert found(tmp_path, exp_project(), "DDP006,DDP010,DDP018", "run_longExp.py") == [
        ("data_factory.py", 15), ("tools.py", 19)]


def test_a_rank_zero_save_in_the_folder_above_is_silent(tmp_path: Path) -> None:
    guard = "if torch.distributed.get_rank() == 0:\n                "
    assert found(tmp_path, exp_project(guard=guard), "DDP010", "run_longExp.py") == []


def test_a_plain_folder_no_script_above_imports_does_not_read_the_folder_above(tmp_path: Path) -> None:
    # A script of the folder run by itself has only its own folder on sys.path.
    run = RUN_LONG.replace("from exp.exp_main import Exp_Main", "import sys\n    Exp_Main = None")
    files = exp_project(run=run)
    files["exp/run_here.py"] = RUN_LONG.replace("from exp.exp_main import Exp_Main", "from exp_main import Exp_Main")
    assert found(tmp_path, files, "DDP010", "exp/run_here.py") == []


def test_the_training_arm_of_a_builder_is_no_evaluation_sampler(tmp_path: Path) -> None:
    files = exp_project()
    files["data_provider/data_factory.py"] = DATA_FACTORY.replace(
        'sampler = DistributedSampler(data_set, shuffle=False)', 'sampler = None')
    assert found(tmp_path, files, "DDP018", "run_longExp.py") == []


def test_a_sampler_made_whatever_the_mode_meets_shuffle_on_the_single_process_arm(tmp_path: Path) -> None:
    # `if ddp and flag != "test":` holds `ddp`: it never meets `shuffle_flag` chosen where ddp is
    # false (above, silent); a sampler made under `flag != "test"` alone does.
    files = exp_project()
    files["data_provider/data_factory.py"] = DATA_FACTORY.replace('if ddp and flag != "test":', 'if flag != "test":')
    assert found(tmp_path, files, "DDP006", "run_longExp.py") == [("data_factory.py", 18)]
