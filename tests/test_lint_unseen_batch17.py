"""Mechanisms seen on batch 17's development half (after its first run): each through
`ddpcheck lint` on a small project written in the style of the scripts."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def lines(tmp_path: Path, files: dict[str, str], select: str, target: str = "train.py") -> list[int]:
    return [f["location"]["line"] for f in lint_project(tmp_path, files, target, select=select)]


SMALL_JOBS_ON_RANK_0 = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def is_rank0():
        return dist.get_rank() == 0


    def run(cfg, dataset):
        dist.init_process_group("gloo")
        {decide}
        if ddp_enabled and {exit_test} and not is_rank0():
            dist.barrier()
            dist.destroy_process_group()
            return
        sampler = DistributedSampler(dataset) if use_ddp_train else None
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, shuffle=sampler is None)
        model = torch.nn.Linear(8, 1)
        if use_ddp_train:
            model = DDP(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        for epoch in range(cfg.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            stop = torch.tensor(0)
            dist.broadcast(stop, src=0)
        if ddp_enabled:
            dist.barrier()
            dist.destroy_process_group()
"""

SWITCHES = "ddp_enabled = dist.get_world_size() > 1\n        use_ddp_train = cfg.use_ddp and cfg.batch_size * dist.get_world_size() >= cfg.min_batch"


def test_an_exit_that_also_needs_a_second_switch_off_leaves_training_on_every_rank(tmp_path: Path) -> None:
    # Only when DDP training is switched off do the other ranks leave; with it on, every rank
    # trains, calls set_epoch and joins the broadcast, and the leavers' barrier meets the last one.
    text = SMALL_JOBS_ON_RANK_0.format(decide=SWITCHES, exit_test="not use_ddp_train")
    assert lines(tmp_path, {"train.py": text}, "DDP002,DDP009") == []


def test_an_exit_on_the_rank_alone_still_leaves_the_broadcast_to_rank_0(tmp_path: Path) -> None:
    text = SMALL_JOBS_ON_RANK_0.format(decide=SWITCHES + "\n        quit_early = True", exit_test="quit_early")
    text = text.replace("if ddp_enabled and quit_early and not is_rank0():", "if ddp_enabled and not is_rank0():")
    assert lines(tmp_path, {"train.py": text}, "DDP009") == [32, 35]  # the forward and the broadcast


def test_a_barrier_of_the_leaving_ranks_without_a_later_barrier_is_reported(tmp_path: Path) -> None:
    text = SMALL_JOBS_ON_RANK_0.format(decide=SWITCHES, exit_test="not use_ddp_train")
    text = text.replace("        if ddp_enabled:\n            dist.barrier()\n", "        if ddp_enabled:\n")
    assert lines(tmp_path, {"train.py": text}, "DDP009") == [17]


LOG_LEVEL = """\
    import argparse
    import logging
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--silent", action="store_true")
        args = parser.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("gloo")
        logging.getLogger().setLevel({level})
        model = DDP(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            loss = model(torch.randn(4, 8)).sum()
            loss.backward()
            optimizer.step()
            logging.info(f"epoch {{epoch}} loss {{loss.item()}}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_level_chosen_by_the_rank_or_a_switch_silences_the_other_ranks(tmp_path: Path) -> None:
    text = LOG_LEVEL.format(level="logging.CRITICAL if local_rank != 0 or args.silent else logging.INFO")
    assert lines(tmp_path, {"train.py": text}, "DDP020") == []


def test_a_level_chosen_by_a_switch_alone_is_the_same_on_every_rank(tmp_path: Path) -> None:
    text = LOG_LEVEL.format(level="logging.CRITICAL if args.silent else logging.INFO")
    assert lines(tmp_path, {"train.py": text}, "DDP020") == [23]


CONSOLE = """\
    import os
    import sys

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    def main_worker(cfg):
        local_rank = int(os.environ["LOCAL_RANK"])
        {redirect}
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(cfg.epochs):
            for x in tqdm(cfg.batches):
                model(x).sum().backward()
                optimizer.step()
            print(f"epoch {{epoch}} done")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main_worker(load_config())
"""


def test_output_the_other_ranks_send_to_the_null_device_reaches_the_console_once(tmp_path: Path) -> None:
    redirect = "if local_rank != 0:\n            f = open(os.devnull, 'w')\n            sys.stdout = sys.stderr = f"
    assert lines(tmp_path, {"train.py": CONSOLE.format(redirect=redirect)}, "DDP020") == []


def test_stdout_alone_sent_away_leaves_the_progress_bar_on_every_rank(tmp_path: Path) -> None:
    redirect = "if local_rank != 0:\n            sys.stdout = open(os.devnull, 'w')"
    assert lines(tmp_path, {"train.py": CONSOLE.format(redirect=redirect)}, "DDP020") == [18]


def test_output_on_every_rank_without_a_redirect_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": CONSOLE.format(redirect="pass")}, "DDP020") == [17, 20]


LOGGER_FACTORY = """\
    import logging


    def create_logger(logging_dir):
        logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(),
                                                          logging.FileHandler(f"{logging_dir}/log.txt")])
        return logging.getLogger(__name__)


    def dummy_logger():
        logger = logging.getLogger(__name__)
        logger.addHandler(logging.NullHandler())
        return logger
"""

LOGGER_USER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils import create_logger, dummy_logger


    def main(args):
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        {choose}
        model = DDP(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(args.steps):
            loss = model(torch.randn(4, 8)).sum()
            loss.backward()
            optimizer.step()
            logger.info(f"step {{step}} loss {{loss.item()}}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(parse_args())
"""


def test_a_logger_that_only_rank_0_sets_up_through_a_project_helper_prints_once(tmp_path: Path) -> None:
    choose = "if rank == 0:\n            logger = create_logger(args.out)\n        else:\n            logger = dummy_logger()"
    files = {"utils.py": LOGGER_FACTORY, "train.py": LOGGER_USER.format(choose=choose)}
    assert lines(tmp_path, files, "DDP020") == []


def test_a_logger_every_rank_sets_up_through_the_helper_prints_on_every_rank(tmp_path: Path) -> None:
    files = {"utils.py": LOGGER_FACTORY, "train.py": LOGGER_USER.format(choose="logger = create_logger(args.out)")}
    assert lines(tmp_path, files, "DDP020") == [18]


SETTINGS_CLASS = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Config:
        batch_size = 8
        learning_rate = 2e-5


    def main():
        {set_rate}
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=Config.learning_rate)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_rate_read_on_the_settings_class_itself_is_its_literal(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SETTINGS_CLASS.format(set_rate="pass")}, "DDP004") == [19]


def test_a_rate_the_script_assigns_to_the_class_is_not_the_literal(tmp_path: Path) -> None:
    text = SETTINGS_CLASS.format(set_rate="Config.learning_rate = float(os.environ['LR'])")
    assert lines(tmp_path, {"train.py": text}, "DDP004") == []


NETWORK = """\
    import torch.nn as nn


    class Unet(nn.Module):
        def __init__(self):
            super().__init__()
            self.resnet_conv_first = nn.ModuleList([nn.Sequential({norm}, nn.SiLU(), nn.Conv2d(8, 8, 3))])

        def forward(self, x):
            for layer in self.resnet_conv_first:
                x = x + layer(x)
            return x
"""

SAMPLES_ON_RANK_0 = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from models import Unet


    def main(loader, steps):
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = DDP(Unet())
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        for step, x in enumerate(loader):
            model(x).mean().backward()
            optimizer.step()
            if step % 100 == 0 and rank == 0:
                with torch.no_grad():
                    sample = model(x)
        dist.destroy_process_group()
"""


def test_a_network_whose_layers_are_only_called_resnet_has_no_buffers_to_broadcast(tmp_path: Path) -> None:
    files = {"models.py": NETWORK.format(norm="nn.GroupNorm(8, 8)"), "train.py": SAMPLES_ON_RANK_0}
    assert lines(tmp_path, files, "DDP009") == []


def test_a_network_with_batch_norm_broadcasts_its_buffers_in_a_rank_0_forward(tmp_path: Path) -> None:
    files = {"models.py": NETWORK.format(norm="nn.BatchNorm2d(8)"), "train.py": SAMPLES_ON_RANK_0}
    assert lines(tmp_path, files, "DDP009") == [18]


LISTED_OPTIONS = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", default=0, type=int)
    parser.add_argument("--epochs", default=10, type=int)
    args = parser.parse_args()

    dist.init_process_group("nccl")
    local_rank = dist.get_rank() % torch.cuda.device_count()
    for arg, value in sorted(vars(args).items()):
        print(f"{{arg}}: {{value}}")
    torch.cuda.set_device({device})
    model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[{device}])
    dist.destroy_process_group()
"""


def test_a_local_rank_flag_only_listed_with_the_other_options_is_never_used(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": LISTED_OPTIONS.format(device="local_rank")}, "DDP008") == []


def test_a_local_rank_flag_the_script_reads_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": LISTED_OPTIONS.format(device="args.local_rank")}, "DDP008") == [8]


SPAWN_OR_ONE_GPU = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_epoch(model, batches, optimizer):
        for x in batches:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()


    def train_ddp(rank, world_size, epochs):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29500"
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = DDP(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            train_epoch(model, [torch.randn(4, 8)], optimizer)
            if rank == 0:
                print(f"epoch {epoch}")
        dist.destroy_process_group()


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--ddp", action="store_true")
        args = parser.parse_args()
        if args.ddp:
            mp.spawn(train_ddp, args=(2, 10), nprocs=2)
            return
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            train_epoch(model, [torch.randn(4, 8)], optimizer)
            print(f"epoch {epoch}")


    if __name__ == "__main__":
        main()
"""


def test_a_loop_beside_the_spawn_runs_in_the_one_launching_process(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SPAWN_OR_ONE_GPU}, "DDP020") == []


def test_the_same_print_in_the_spawned_workers_is_reported(tmp_path: Path) -> None:
    text = SPAWN_OR_ONE_GPU.replace("            if rank == 0:\n                print", "            print")
    assert lines(tmp_path, {"train.py": text}, "DDP020") == [25]


CYCLE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Config:
        lr = 1e-4


    def main(args):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=Config.lr)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr={peak}, total_steps=args.steps)
        dist.destroy_process_group()
"""


def test_a_rate_a_one_cycle_schedule_replaces_with_a_peak_from_the_command_line_is_not_reported(
        tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": CYCLE.format(peak="args.max_lr")}, "DDP004") == []


def test_a_constant_rate_under_a_constant_peak_of_the_one_cycle_schedule_is_reported_once(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": CYCLE.format(peak="3e-4")}, "DDP004") == [17]  # (at the optimizer)


EVAL_LISTS = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def validate(model, val_set, local_rank):
        loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set))
        losses = []
        top1 = []
        with torch.no_grad():
            for images, target in loader:
                output = model(images)
                losses.append(torch.nn.functional.cross_entropy(output, target).item())
                top1.append((output.argmax(1) == target).float().mean().item())
        losses = torch.Tensor(losses)
        top1 = torch.Tensor(top1)
        {reduce}
        if local_rank == 0:
            print(f"loss {{losses.mean():.4f}} top1 {{top1.mean():.2f}}")
        return top1.mean()
"""


def test_lists_of_a_shard_turned_into_tensors_and_printed_are_one_shard(tmp_path: Path) -> None:
    assert lines(tmp_path, {"evaluate.py": EVAL_LISTS.format(reduce="pass")}, "DDP036", "evaluate.py") == [20]


def test_lists_of_a_shard_all_reduced_after_the_conversion_are_every_rank(tmp_path: Path) -> None:
    text = EVAL_LISTS.format(reduce="dist.all_reduce(losses)\n        dist.all_reduce(top1)")
    assert lines(tmp_path, {"evaluate.py": text}, "DDP036", "evaluate.py") == []


EVAL_DICT = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def reduce_tensor(t, world_size):
        t = t.clone()
        dist.all_reduce(t)
        return t / world_size


    def val(trainer, val_set, world_size, rank, writer):
        loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set))
        totals = {{"loss": 0.0, "photo": 0.0}}
        with torch.no_grad():
            for inputs in loader:
                losses = trainer(inputs)
                for key in losses:
                    losses[key] = {reduced}
                for key in totals:
                    totals[key] += float(losses[key].mean())
        if rank == 0:
            writer.add_scalar("val/loss", totals["loss"] / len(loader))
"""


def test_losses_reduced_entry_by_entry_before_they_are_summed_are_every_rank(tmp_path: Path) -> None:
    text = EVAL_DICT.format(reduced="reduce_tensor(losses[key].data, world_size)")
    assert lines(tmp_path, {"evaluate.py": text}, "DDP036", "evaluate.py") == []


def test_losses_only_detached_entry_by_entry_are_one_shard(tmp_path: Path) -> None:
    text = EVAL_DICT.format(reduced="losses[key].detach()")
    assert lines(tmp_path, {"evaluate.py": text}, "DDP036", "evaluate.py") == [24]


SPAWN_THEN_SAVE = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def worker(rank, world_size, model):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "29500"
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        net = DDP(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for step in range(100):
            net(torch.randn(4, 8)).sum().backward()
            optimizer.step()
        {worker_save}
        dist.destroy_process_group()


    if __name__ == "__main__":
        model = torch.nn.Linear(8, 1)
        mp.spawn(worker, args=(2, model), nprocs=2, join=True)
        torch.save(model.state_dict(), "model.pt")
"""


def test_a_save_after_the_spawn_returns_is_made_once_by_the_launching_process(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SPAWN_THEN_SAVE.format(worker_save="pass")}, "DDP010") == []


def test_a_save_in_the_spawned_workers_is_made_by_every_rank(tmp_path: Path) -> None:
    text = SPAWN_THEN_SAVE.format(worker_save='torch.save(net.module.state_dict(), "model.pt")')
    assert lines(tmp_path, {"train.py": text}, "DDP010") == [18]


GPU_FROM_RANK = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(loader):
        dist.init_process_group("nccl")
        {name} = dist.get_rank()
        model = DDP(torch.nn.Linear(8, 1).to({name}), device_ids=[{name}])
        optimizer = torch.optim.Adam(model.parameters(), lr=float(input()))
        for x in loader:
            model(x.to({name})).sum().backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        train(make_loader())
"""


def test_a_rank_read_into_a_name_for_a_gpu_is_reported_where_it_is_read(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": GPU_FROM_RANK.format(name="gpu_id")}, "DDP007") == [8]


def test_a_rank_kept_as_the_rank_is_reported_where_it_becomes_a_device(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": GPU_FROM_RANK.format(name="rank")}, "DDP007") == [9]


TRAINING_LOSS_REDUCED = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def reduce_loss(tensor, rank):
        with torch.no_grad():
            dist.reduce(tensor, dst=0)


    def evaluate(net, loader):
        correct = total = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (net(x).argmax(1) == y).sum().item()
                total += len(y)
        {reduce_eval}
        return correct / total


    def main(train_set, val_set, rank):
        dist.init_process_group("gloo")
        net = DDP(torch.nn.Linear(8, 2))
        opt = torch.optim.Adam(net.parameters(), lr=float(input()))
        train_loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set))
        for epoch in range(3):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                reduce_loss(loss, rank)
            accuracy = evaluate(net, val_loader)
        dist.destroy_process_group()
"""


def test_a_loss_reduced_by_a_helper_only_the_training_loop_calls_reduces_no_metric(tmp_path: Path) -> None:
    text = TRAINING_LOSS_REDUCED.format(reduce_eval="pass")
    assert lines(tmp_path, {"train.py": text}, "DDP018") == []


def test_an_evaluation_that_all_reduces_its_counts_over_a_padding_sampler_is_reported(tmp_path: Path) -> None:
    text = TRAINING_LOSS_REDUCED.format(
        reduce_eval="counts = torch.tensor([correct, total])\n        dist.all_reduce(counts)\n"
                    "        correct, total = counts.tolist()")
    assert lines(tmp_path, {"train.py": text}, "DDP018") == [30]


PARAMS_FILLED_BY_A_METHOD = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    class Workbench:
        def __init__(self, dataset, ddp):
            self.ddp = ddp
            self.dataset = dataset

        def {helper}(self, dataset, params):
            sampler = DistributedSampler(dataset)
            params["{key}"] = sampler

        def run(self):
            dist.init_process_group("gloo")
            model = DDP(torch.nn.Linear(8, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=float(input()))
            params = {{"batch_size": 8, "shuffle": True}}
            if self.ddp:
                self.{helper}(self.dataset, params)
            loader = DataLoader(self.dataset, **params)
            for epoch in range(10):
                for x in loader:
                    model(x).sum().backward()
                    optimizer.step()


    if __name__ == "__main__":
        Workbench(load(), True).run()
"""


def test_a_sampler_a_method_writes_into_the_loader_options_is_the_loaders(tmp_path: Path) -> None:
    text = PARAMS_FILLED_BY_A_METHOD.format(helper="get_sampler", key="sampler")
    assert lines(tmp_path, {"train.py": text}, "DDP001") == []


def test_options_a_method_fills_without_a_sampler_leave_the_loader_unsharded(tmp_path: Path) -> None:
    text = PARAMS_FILLED_BY_A_METHOD.format(helper="log_sampler", key="note")
    assert lines(tmp_path, {"train.py": text}, "DDP001") == [24]


def test_a_logger_set_up_differently_on_rank_0_and_the_others_is_configured_by_rank(tmp_path: Path) -> None:
    choose = ("if rank == 0:\n            logger = create_logger(args.out)\n        else:\n"
              "            logger = create_logger(f\"{args.out}/rank{rank}\")")
    files = {"utils.py": LOGGER_FACTORY, "train.py": LOGGER_USER.format(choose=choose)}
    assert lines(tmp_path, files, "DDP020") == []


def test_a_logger_set_up_alike_in_both_arms_of_a_rank_test_prints_on_every_rank(tmp_path: Path) -> None:
    choose = ("if rank == 0:\n            logger = create_logger(args.out)\n        else:\n"
              "            logger = create_logger(args.out)")
    files = {"utils.py": LOGGER_FACTORY, "train.py": LOGGER_USER.format(choose=choose)}
    assert lines(tmp_path, files, "DDP020") == [21]


APPLIED = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def weights_init(m):
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, 0.0, 0.02)


    def main(loader):
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        net = {build}
        opt = torch.optim.Adam(net.parameters(), lr=float(input()))
        for x in loader:
            net(x.to(gpu)).mean().backward()
            opt.step()
        if dist.get_rank() == 0:
            torch.save(net.state_dict(), "final.pth")
        dist.destroy_process_group()
"""


def test_a_wrapper_handed_back_by_module_apply_is_the_wrapper(tmp_path: Path) -> None:
    text = APPLIED.format(build="DDP(torch.nn.Linear(8, 1).to(gpu), [gpu]).apply(weights_init)")
    assert lines(tmp_path, {"train.py": text}, "DDP019") == [20]


def test_a_module_initialised_by_apply_before_the_wrap_saves_its_own_keys(tmp_path: Path) -> None:
    text = APPLIED.format(build="torch.nn.Linear(8, 1).to(gpu).apply(weights_init)")
    assert lines(tmp_path, {"train.py": text}, "DDP019") == []


GAN_STEP = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(loader, make_g, make_d):
        dist.init_process_group("gloo")
        raw_netD = make_d()
        netG = DDP(make_g())
        netD = DDP(raw_netD)
        opt_g = torch.optim.Adam(netG.parameters(), lr=float(input()))
        opt_d = torch.optim.Adam(netD.parameters(), lr=float(input()))
        for real, noise in loader:
            for p in raw_netD.parameters():
                p.requires_grad = True
            fake = netG(noise)
            loss_d = netD(real).mean() - netD(fake.detach()).mean()
            loss_d.backward()
            opt_d.step()
            for p in raw_netD.parameters():
                p.requires_grad = {frozen}
            loss_g = -raw_netD(fake).mean()
            loss_g.backward()
            opt_g.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        train(make_loader(), Generator, Discriminator)
"""


def test_a_discriminator_frozen_for_the_generator_step_may_run_outside_its_wrapper(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": GAN_STEP.format(frozen="False")}, "DDP013") == []


def test_a_discriminator_left_trainable_outside_its_wrapper_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": GAN_STEP.format(frozen="True")}, "DDP013") == [22]


SYNTHETIC = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def main():
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = DDP({net})
        dataset = TensorDataset(torch.randn(1000, 10), torch.randn(1000, 1))
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset, shuffle=True))
        optimizer = torch.optim.SGD(model.parameters(), lr=float(os.environ["LR"]))
        for epoch in range(10):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_synthetic_set_drawn_once_with_the_same_seed_is_the_same_set_on_every_rank(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SYNTHETIC.format(net="torch.nn.Linear(10, 1)")}, "DDP029") == []


def test_the_same_seed_with_dropout_in_training_is_reported(tmp_path: Path) -> None:
    net = "torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Dropout(0.1), torch.nn.Linear(10, 1))"
    assert lines(tmp_path, {"train.py": SYNTHETIC.format(net=net)}, "DDP029") == [11]


RESUMED_COUNTER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    init_from = os.environ.get("INIT_FROM", "scratch")
    max_iters = 1000
    dist.init_process_group("gloo")
    master_process = dist.get_rank() == 0
    iter_num = 0
    best_val_loss = 1e9
    if init_from == "resume":
        checkpoint = torch.load("ckpt.pt", map_location="cpu")
        iter_num = checkpoint["iter_num"]
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(os.environ["LR"]))
    while True:
        if iter_num % 100 == 0 and master_process:
            val_loss = model.module(torch.randn(4, 8)).pow(2).mean().item()
            if val_loss < best_val_loss:
                best_val_loss = val_loss
                checkpoint = {{"model": model.module.state_dict(), "iter_num": iter_num}}
                torch.save(checkpoint, "ckpt.pt")
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        iter_num += 1
        if {stop}:
            break
    dist.destroy_process_group()
"""


def test_a_step_count_resumed_from_a_checkpoint_is_the_same_on_every_rank(tmp_path: Path) -> None:
    # (`checkpoint` is bound again later on rank 0 only, to save: not the one the count came from.)
    assert lines(tmp_path, {"train.py": RESUMED_COUNTER.format(stop="iter_num > max_iters")}, "DDP035") == []


def test_a_stop_on_rank_0s_best_validation_loss_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": RESUMED_COUNTER.format(stop="best_val_loss < 0.01")}, "DDP035") == [29]


SHIPPED_SWITCH = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 1)
    use_compile = {value}
    if use_compile:
        model = torch.compile(model)
    model = DDP(model)
    raw_model = model.module
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(os.environ["LR"]))
    for step in range(100):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    if dist.get_rank() == 0:
        torch.save({{"model": raw_model.state_dict()}}, "ckpt.pt")
    dist.destroy_process_group()
"""


def test_a_module_switch_shipped_off_never_compiles(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SHIPPED_SWITCH.format(value="False")}, "DDP024") == []


def test_a_module_switch_shipped_on_compiles(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SHIPPED_SWITCH.format(value="True")}, "DDP024") == [19]


SETTINGS_SCHEDULE = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    parser = argparse.ArgumentParser()
    parser.add_argument("--max_lr", type=float, default=1e-3)
    args = parser.parse_args()


    class TrainGlobalConfig:
        lr = 0.0002
        SchedulerClass = torch.optim.lr_scheduler.OneCycleLR
        scheduler_params = dict(max_lr={peak}, epochs=10, steps_per_epoch=100)


    class Fitter:
        def __init__(self, model, config):
            self.model = model
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr)
            self.scheduler = config.SchedulerClass(self.optimizer, **config.scheduler_params)


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        fitter = Fitter(DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank]), TrainGlobalConfig)
        dist.destroy_process_group()
"""


def test_a_schedule_a_settings_class_holds_sets_the_peak_from_the_command_line(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SETTINGS_SCHEDULE.format(peak="args.max_lr")}, "DDP004") == []


def test_a_settings_class_rate_without_a_peak_from_the_command_line_is_reported(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SETTINGS_SCHEDULE.format(peak="3e-4")}, "DDP004") == [22]
