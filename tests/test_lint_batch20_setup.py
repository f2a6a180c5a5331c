"""Logging set up by rank (DDP020) and the inner model chosen on the same test as the wrap
(DDP019), on mechanisms seen on public scripts of batch 20: each through `ddpcheck lint` on a
small project written in the style of the scripts, with a clean variant."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A console handler added to the root logger on every rank, a file handler on rank 0 only: the
# console still shows every rank's records.
LOG_UTIL = """\
    import logging
    import os


    def set_stream_logger(log_level=logging.DEBUG):
        import colorlog
        sh = {console}
        sh.setLevel(log_level)
        sh.setFormatter(colorlog.ColoredFormatter("%(asctime)s %(log_color)s%(levelname)s%(reset)s %(message)s"))
        logging.root.addHandler(sh)


    def set_file_logger(work_dir, log_level=logging.DEBUG):
        fh = logging.FileHandler(os.path.join(work_dir, "log-ing"))
        fh.setLevel(log_level)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logging.root.addHandler(fh)
"""

LOG_SCRIPT = """\
    import argparse
    import logging
    import time
    import torch
    import torch.distributed as dist
    from util import set_stream_logger, set_file_logger


    def parse_option():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--save_folder", type=str, default="save")
        opt = parser.parse_args()
        logging.root.setLevel(logging.INFO)
        {stream_setup}
        if opt.local_rank == 0:
            set_file_logger(work_dir=opt.save_folder, log_level=logging.DEBUG)
        return opt


    def train(loader, model, optimizer, epoch):
        for idx, (images, labels) in enumerate(loader):
            loss = model(images.cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (idx + 1) % 10 == 0:
                logging.info("Train: [{{0}}][{{1}}] loss {{2:.3f}}".format(epoch, idx + 1, loss.item()))


    def main():
        opt = parse_option()
        torch.cuda.set_device(opt.local_rank)
        dist.init_process_group(backend="nccl")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).cuda(), device_ids=[opt.local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
        for epoch in range(1, 11):
            time1 = time.time()
            train(loader, model, optimizer, epoch)
            time2 = time.time()
            logging.info("epoch {{}}, total time {{:.2f}}".format(epoch, time2 - time1))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_console_handler_on_every_rank_beside_a_rank_zero_file_handler(tmp_path: Path) -> None:
    files = {"util.py": LOG_UTIL.format(console="colorlog.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(stream_setup="set_stream_logger(logging.DEBUG)")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 28), ("train.py", 42)]


def test_console_handler_on_rank_zero_only_is_clean(tmp_path: Path) -> None:
    # The console handler itself is added on rank 0 only: the other ranks print nothing.
    files = {"util.py": LOG_UTIL.format(console="colorlog.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(stream_setup="if opt.local_rank == 0:\n            set_stream_logger()")}
    assert lines(tmp_path, files, "DDP020") == []


def test_file_handler_on_rank_zero_and_no_console_handler_is_clean(tmp_path: Path) -> None:
    # Only a file handler, on rank 0: the records of the other ranks go nowhere.
    files = {"util.py": LOG_UTIL.format(console="colorlog.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(stream_setup="pass")}
    assert lines(tmp_path, files, "DDP020") == []


def test_rank_zero_level_beside_a_console_handler_is_clean(tmp_path: Path) -> None:
    # The level is set by rank (WARNING on the others): that silences the console too.
    files = {"util.py": LOG_UTIL.format(console="logging.StreamHandler()"),
             "train.py": LOG_SCRIPT.format(
                 stream_setup="set_stream_logger(logging.DEBUG)\n"
                              "        if opt.local_rank != 0:\n            logging.root.setLevel(logging.WARNING)")}
    assert lines(tmp_path, files, "DDP020") == []


# A trainer that keeps the rank as `self.device`, built by a worker that `mp.spawn` starts and
# that the same script calls as `train(0, 1, config)` when it is not distributed: `self.device`
# is the process index there, not only the `0` of the single-process call.
TRAINER_SCRIPT = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn


    class Trainer:
        def __init__(self, rank, config):
            self.config = config
            self.device = rank
            self.generator = nn.Linear(8, 2).to(rank)
            if self.config.distributed:
                self.generator = nn.parallel.DistributedDataParallel(self.generator, device_ids=[self.device])
            if self.config.distributed:
                self.g_module = self.generator.module
            else:
                self.g_module = {plain}

        def save_checkpoint(self, step):
            torch.save({{"g": self.g_module.state_dict()}}, f"{{step}}.pt")

        def train(self):
            for i in range(1000):
                loss = self.generator(torch.randn(4, 8)).sum()
                loss.backward()
                {save}


    def train(rank, world_size, config):
        torch.cuda.set_device(rank)
        if config.distributed:
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
        Trainer(rank, config).train()
        if config.distributed:
            dist.destroy_process_group()


    def main(config):
        if config.distributed:
            mp.spawn(train, args=(torch.cuda.device_count(), config), nprocs=torch.cuda.device_count())
        else:
            train(0, 1, config)


    if __name__ == "__main__":
        main(load_config())
"""

GUARDED_SAVE = "if self.device == 0:\n                    self.save_checkpoint(i)"


def test_inner_model_where_wrapped_and_the_model_where_not_saves_no_prefix(tmp_path: Path) -> None:
    files = {"train.py": TRAINER_SCRIPT.format(plain="self.generator", save=GUARDED_SAVE)}
    assert lines(tmp_path, files, "DDP019") == []


def test_wrapper_kept_on_the_wrapped_arm_is_still_reported(tmp_path: Path) -> None:
    # Both arms keep the model itself: where it is wrapped, the wrapper.
    files = {"train.py": TRAINER_SCRIPT.format(plain="self.generator", save=GUARDED_SAVE)
             .replace("self.g_module = self.generator.module", "self.g_module = self.generator")}
    assert lines(tmp_path, files, "DDP019") == [("train.py", 20)]


# The training script resumes from `--ckpt` into the plain model before it wraps it, reading the
# key its DDP model's state dict is saved under; a linear-probe script beside it strips the prefix
# for its own use, which does not help the training script read its checkpoints back.
SUPCON_UTIL = """\
    import torch


    def save_model(model, optimizer, opt, epoch, save_file):
        state = {
            "opt": opt,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
        }
        torch.save(state, save_file)
"""

SUPCON_SCRIPT = """\
    import argparse
    import torch
    import torch.distributed as dist
    from util import save_model
    from networks import SupConResNet


    def set_model(opt):
        model = SupConResNet()
        if opt.ckpt != "":
            ckpt = torch.load(opt.ckpt, map_location="cpu")
            state_dict = ckpt[{key!r}]
            model.load_state_dict(state_dict)
        model = model.to(opt.local_rank)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[opt.local_rank])
        return model


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        parser.add_argument("--ckpt", type=str, default="")
        opt = parser.parse_args()
        torch.cuda.set_device(opt.local_rank)
        dist.init_process_group(backend="nccl")
        model = set_model(opt)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            loss = model(torch.randn(4, 3)).sum()
            loss.backward()
            optimizer.step()
            if opt.local_rank == 0:
                save_model(model, optimizer, opt, epoch, f"ckpt_epoch_{{epoch}}.pth")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

SUPCON_LINEAR = """\
    import torch
    from networks import SupConResNet


    def set_model(opt):
        model = SupConResNet()
        state_dict = torch.load(opt.ckpt, map_location="cpu")["model"]
        new_state_dict = {}
        for k, v in state_dict.items():
            new_state_dict[k.replace("module.", "")] = v
        model.load_state_dict(new_state_dict)
        return model


    if __name__ == "__main__":
        set_model(parse())
"""

SUPCON_NETWORKS = """\
    import torch.nn as nn


    class SupConResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(3, 8)

        def forward(self, x):
            return self.encoder(x)
"""


def _supcon(key: str) -> dict[str, str]:
    return {"util.py": SUPCON_UTIL, "networks.py": SUPCON_NETWORKS, "main_linear.py": SUPCON_LINEAR,
            "main_supcon.py": SUPCON_SCRIPT.format(key=key)}


def test_pretrained_weights_under_another_key_leave_the_stripping_script_in_charge(tmp_path: Path) -> None:
    # `ckpt["encoder"]` is not what the run saves: its checkpoints are read only by main_linear,
    # which strips the prefix.
    assert lines(tmp_path, _supcon("encoder"), "DDP019", "main_supcon.py") == []
