"""Output on every rank (DDP020) and checkpoints saved by every rank (DDP010), on mechanisms seen
on public scripts of batch 28: a logger known by its value, not its name; `basicConfig`'s console
handler beside a rank-0 file handler; a trainer started through a coordinator that keeps the
worker as a bound method and spawns it deep in a command-line tool, whose base class's `train()`
runs methods a DDP subclass overrides. Each through `ddpcheck lint` on a small project written in
the style of the scripts, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines, lint_project


# A file logger made by a project factory on every rank, under a name no logger pattern knows.
LOG_FACTORY = """\
    import logging


    def logger(path, need_stdout=False):
        log = logging.getLogger(__name__)
        log.setLevel(logging.DEBUG)
        fh = logging.FileHandler(path)
        log.addHandler(fh)
        if need_stdout:
            log.addHandler(logging.StreamHandler())
        return log
"""

LOG_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from utilities import logger
    {extra_import}

    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--exp", type=str, default="run")
    args = parser.parse_args()


    def main():
        dist.init_process_group("nccl", init_method="tcp://10.0.0.1:23456", rank=args.rank, world_size=args.world_size)
        {make}
        model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(90):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            {report}


    if __name__ == "__main__":
        main()
"""


def test_logger_known_by_its_value_is_reported(tmp_path: Path) -> None:
    files = {"utilities.py": LOG_FACTORY,
             "train.py": LOG_SCRIPT.format(extra_import="", make="print_logger = logger(f'log/{args.exp}/stdout.log')",
                                           report="print_logger.info(f'epoch {epoch} loss {loss.item():.3f}')")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 26)]


def test_metrics_logger_log_method_is_not_a_logger(tmp_path: Path) -> None:
    # `run.log(...)` of an experiment tracker: a `log` method, not a logging.Logger. (Where every
    # rank starts its own run it is that run's `log`, reported as such: see the wandb case below.)
    files = {"utilities.py": LOG_FACTORY,
             "train.py": LOG_SCRIPT.format(
                 extra_import="import wandb",
                 make='run = wandb.init(project=args.exp, mode="online" if args.rank == 0 else "disabled")',
                 report="run.log({'loss': loss.item()})")}
    assert lines(tmp_path, files, "DDP020") == []


def test_run_object_log_of_every_rank_is_reported_as_the_run_s(tmp_path: Path) -> None:
    files = {"utilities.py": LOG_FACTORY,
             "train.py": LOG_SCRIPT.format(extra_import="import wandb", make="run = wandb.init(project=args.exp)",
                                           report="run.log({'loss': loss.item()})")}
    findings = lint_project(tmp_path, files, "train.py", select="DDP020")
    assert [(f["location"]["line"], "`run.log` (each rank started its own run)" in f["message"])
            for f in findings] == [(26, True)]


# The root logger gets a console handler from `basicConfig` at import, on every rank; rank 0 adds
# a file handler as well.
ROOT_LOG_UTIL = """\
    import logging

    _format = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"


    def config_logger(log_level=logging.INFO):
        logging.basicConfig({config})


    def log_to_file(log_filename, log_level=logging.INFO):
        log = logging.getLogger()
        fh = logging.FileHandler(log_filename)
        fh.setLevel(log_level)
        fh.setFormatter(logging.Formatter(_format))
        log.addHandler(fh)
"""

ROOT_LOG_SCRIPT = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    import logging_utils
    logging_utils.config_logger()


    def train(world_rank, loader):
        model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(100):
            tr_loss = []
            for inp, tar in loader:
                loss = ((model(inp.cuda()) - tar.cuda()) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                tr_loss.append(loss.item())
            logging.info("  Avg train loss=%f" % (sum(tr_loss) / len(tr_loss)))


    if __name__ == "__main__":
        dist.init_process_group(backend="nccl", init_method="env://")
        world_rank = dist.get_rank()
        if world_rank == 0:
            logging_utils.log_to_file(os.path.join("exp", "out.log"))
        train(world_rank, make_loader())
"""


def test_basic_config_console_beside_a_rank_zero_file_handler_is_reported(tmp_path: Path) -> None:
    files = {"logging_utils.py": ROOT_LOG_UTIL.format(config="format=_format, level=log_level"),
             "train.py": ROOT_LOG_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 21)]


def test_basic_config_to_a_file_beside_a_rank_zero_file_handler_is_clean(tmp_path: Path) -> None:
    # `basicConfig(filename=...)` writes to a file, not the console: only rank 0 logs at INFO
    # where anyone looks.
    files = {"logging_utils.py": ROOT_LOG_UTIL.format(config="filename='all.log', format=_format, level=log_level"),
             "train.py": ROOT_LOG_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == []


# A command-line tool: the command calls a handler, which builds an app object; the app hands its
# bound worker method to a coordinator that spawns the processes. The worker builds a DDP subclass
# of a base trainer whose `train()` shows an epoch bar and calls methods the subclass overrides
# (the per-batch bar and the checkpoint test, both on rank 0 only).
COMMAND = """\
    import click
    from logic.train import cli_train


    @click.command()
    @click.option("--config", default=None)
    def train(config):
        cli_train(config)
"""

LOGIC_TRAIN = """\
    from logic.app import App


    def cli_train(config):
        app = App(config)
        app.train()
"""

LOGIC_APP = """\
    import torch
    from lib.coordinator import Coordinator
    from lib.trainer import Trainer
    from lib.ddp_trainer import DDPTrainer


    class App:
        def __init__(self, config):
            self.config = config

        def train(self):
            if self.config.use_ddp:
                self._execute_ddp_training()
            else:
                self._execute_training()

        def _execute_ddp_training(self):
            world_size = torch.cuda.device_count()
            coordinator = Coordinator(self._ddp_training_fn, world_size)
            coordinator.run()

        def _ddp_training_fn(self, rank, world_size):
            trainer = DDPTrainer(self.config, rank, world_size)
            trainer.train()

        def _execute_training(self):
            trainer = Trainer(self.config)
            trainer.train()
"""

COORDINATOR = """\
    import os
    import torch.multiprocessing as mp
    from torch.distributed import destroy_process_group, init_process_group


    class Coordinator:
        def __init__(self, ddp_func, world_size):
            self.ddp_func = ddp_func
            self.world_size = world_size
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"

        def run_process(self, rank):
            init_process_group(backend="nccl", rank=rank, world_size=self.world_size)
            self.ddp_func(rank, self.world_size)
            destroy_process_group()

        def run(self):
            mp.spawn(self.run_process, nprocs=self.world_size, join=True)
"""

TRAINER = """\
    import torch
    from tqdm import tqdm, trange


    class Trainer:
        def __init__(self, config):
            self.config = config
            self.model = config.model.cuda()
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)

        def train(self):
            for epoch in trange(self.config.epochs):
                self._run_epoch(epoch)
                if self._should_save_checkpoint(epoch):
                    self._save_checkpoint(epoch)

        def _run_batch(self, source, targets):
            self.optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(source), targets)
            loss.backward()
            self.optimizer.step()
            return loss.item()

        def _run_epoch(self, epoch):
            for source, targets in tqdm(self.config.train_loader):
                self._run_batch(source.cuda(), targets.cuda())

        def _should_save_checkpoint(self, epoch):
            return self.config.save_checkpoint and epoch % self.config.interval == 0

        def _save_checkpoint(self, epoch):
            torch.save({"epoch": epoch, "model": self.model.state_dict()}, f"checkpoint_{epoch}.pth")
"""

DDP_TRAINER = """\
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm
    from lib.trainer import Trainer


    class DDPTrainer(Trainer):
        def __init__(self, config, rank, world_size):
            self._rank = rank
            self._world_size = world_size
            torch.cuda.set_device(rank)
            super().__init__(config)
            self.model = DDP(self.model, device_ids=[rank])

        def _run_epoch(self, epoch):
            self.config.train_loader.sampler.set_epoch(epoch)
            if self._rank == 0:
                data_iterator = tqdm(self.config.train_loader)
            else:
                data_iterator = self.config.train_loader
            for source, targets in data_iterator:
                self._run_batch(source.cuda(), targets.cuda())
{should_save}"""

RANK_ZERO_SAVE = """
        def _should_save_checkpoint(self, epoch):
            return self._rank == 0 and self.config.save_checkpoint and epoch % self.config.interval == 0
"""


def _tool(should_save: str) -> dict[str, str]:
    return {"commands.py": COMMAND, "logic/__init__.py": "", "logic/train.py": LOGIC_TRAIN,
            "logic/app.py": LOGIC_APP, "lib/__init__.py": "", "lib/coordinator.py": COORDINATOR,
            "lib/trainer.py": TRAINER, "lib/ddp_trainer.py": DDP_TRAINER.format(should_save=should_save)}


def test_epoch_bar_of_a_base_trainer_run_by_a_coordinated_worker_is_reported(tmp_path: Path) -> None:
    # The base `_run_epoch`'s bar is not the one that runs: the DDP trainer overrides it.
    assert lines(tmp_path, _tool(RANK_ZERO_SAVE), "DDP020", "commands.py") == [("trainer.py", 12)]


def test_checkpoint_behind_a_rank_zero_test_the_subclass_overrides_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, _tool(RANK_ZERO_SAVE), "DDP010", "commands.py") == []


def test_checkpoint_behind_the_base_test_is_reported(tmp_path: Path) -> None:
    # Without the override, the base test runs on every rank: every rank saves.
    assert lines(tmp_path, _tool(""), "DDP010", "commands.py") == [("trainer.py", 32)]


# A network of the project whose attention layer prints the shapes it is given: the forward runs
# at each training step of every rank that trains the DDP model.
BLOCKS = """\
    import torch
    import torch.nn as nn


    class Attention(nn.Module):
        def __init__(self, dim, debug=False):
            super().__init__()
            self.debug = debug
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            {show}
            return self.proj(x)


    class Net(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.attn = Attention(dim)
            self.head = nn.Linear(dim, 1)

        def forward(self, x):
            h = self.attn(x)
            return self.head(h)
"""

FORWARD_SCRIPT = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    from models.blocks import Net


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = Net(16)
        model = DistributedDataParallel(model.cuda(), device_ids=[local_rank])
        dataset = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_print_in_the_forward_of_a_layer_of_the_wrapped_network_is_reported(tmp_path: Path) -> None:
    files = {"models/__init__.py": "", "models/blocks.py": BLOCKS.format(show='print("attention input", x.size())'),
             "train.py": FORWARD_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == [("blocks.py", 12)]


def test_print_in_the_forward_under_a_debug_switch_is_clean(tmp_path: Path) -> None:
    files = {"models/__init__.py": "", "models/blocks.py": BLOCKS.format(
                 show='if self.debug:\n                print("attention input", x.size())'),
             "train.py": FORWARD_SCRIPT}
    assert lines(tmp_path, files, "DDP020") == []


# The same logging set-up in a trainer class whose records are shown under a flag set from the
# rank in `__init__`, combined with a configuration switch.
FLAG_TRAINER = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    import logging_utils
    logging_utils.config_logger()


    class Trainer:
        def __init__(self, params):
            self.world_rank = 0
            if int(os.environ.get("WORLD_SIZE", 1)) > 1:
                dist.init_process_group(backend="nccl", init_method="env://")
                self.world_rank = dist.get_rank()
            self.log_to_screen = params.log_to_screen and self.world_rank == 0
            if self.world_rank == 0:
                logging_utils.log_to_file(os.path.join(params.exp_dir, "out.log"))
            self.model = DistributedDataParallel(torch.nn.Linear(8, 2).cuda())
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
            self.params = params

        def train(self):
            for epoch in range(self.params.max_epochs):
                for inp, tar in self.params.loader:
                    loss = ((self.model(inp.cuda()) - tar.cuda()) ** 2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                if self.log_to_screen:
                    logging.info("Train loss: {}".format(loss.item()))


    if __name__ == "__main__":
        Trainer(load_params()).train()
"""


def test_log_under_a_flag_an_attribute_holds_from_a_rank_test_is_clean(tmp_path: Path) -> None:
    files = {"logging_utils.py": ROOT_LOG_UTIL.format(config="format=_format, level=log_level"),
             "train.py": FLAG_TRAINER}
    assert lines(tmp_path, files, "DDP020") == []


def test_log_under_a_flag_an_attribute_holds_from_a_config_switch_is_reported(tmp_path: Path) -> None:
    files = {"logging_utils.py": ROOT_LOG_UTIL.format(config="format=_format, level=log_level"),
             "train.py": FLAG_TRAINER.replace("params.log_to_screen and self.world_rank == 0",
                                              "params.log_to_screen and params.verbose")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 31)]
