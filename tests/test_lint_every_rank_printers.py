"""Console output in training loops (DDP020) through project printers and rank tests as projects
write them, through `ddpcheck lint`: a logger object that prints on rank "0" only (the rank kept
as the launcher's string), one switched on by `True if local_rank == 0 else False`, loop logs
that format the GPU index, `rank is None or rank == 0`, `trange` bars and bars labelled with the
rank. The clean variants stay clean; the same code without the rank test is still reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

LOGGER_MODULE = """\
    import os
    import sys


    class RunLogger:
        def __init__(self, out_dir=None, rank="0"):
            self.rank = rank
            self.file = None
            if out_dir is not None:
                os.makedirs(out_dir, exist_ok=True)
                self.file = open(os.path.join(out_dir, f"log_{{rank}}.txt"), "a")

        def write(self, msg):
            {test}
                print(msg)
            if self.file is not None:
                print(msg, file=self.file)
                self.file.flush()

        def __call__(self, msg):
            self.write(msg)
    """

LOGGER_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tools.run_logger import RunLogger


    class Trainer:
        def __init__(self, cfg):
            self.logger = RunLogger(cfg.out_dir, rank=os.environ["RANK"] if "RANK" in os.environ else "0")
            self.cfg = cfg

        def fit(self, model, loader, optimizer):
            for epoch in range(self.cfg.epochs):
                loader.sampler.set_epoch(epoch)
                for step, (feats, target) in enumerate(loader):
                    loss = torch.nn.functional.cross_entropy(model(feats.cuda()), target.cuda())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if step % 50 == 0:
                        self.logger.write(f"epoch {epoch} step {step} loss {loss.item():.4f}")


    def main(cfg):
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        model = DDP(build_model(cfg).cuda())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        Trainer(cfg).fit(model, build_loader(cfg), optimizer)
    """


def test_a_logger_that_prints_on_rank_string_zero_only_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"tools/run_logger.py": LOGGER_MODULE.format(test='if self.rank == "0":'),
                             "tools/__init__.py": "", "train.py": LOGGER_SCRIPT})
    assert finding_set(tmp_path, "train.py", "tools/run_logger.py", select="DDP020") == set()


def test_a_logger_that_prints_everywhere_is_reported_where_the_loop_calls_it(tmp_path) -> None:
    write_project(tmp_path, {"tools/run_logger.py": LOGGER_MODULE.format(test="if msg:"),
                             "tools/__init__.py": "", "train.py": LOGGER_SCRIPT})
    assert finding_set(tmp_path, "train.py", "tools/run_logger.py", select="DDP020") == {("train.py", 24, "DDP020")}


SWITCHED_LOGGER = """\
    class Logger:
        def __init__(self, run_name, enable=True):
            self.enable = enable
            self.run_name = run_name

        def print(self, info):
            if self.enable:
                print(info)
    """

SWITCHED_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from utils.logger import Logger


    def main():
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl")
        is_main = {flag}
        logger = Logger("motion", enable=is_main)
        model = DDP(build_net().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(40):
            logger.print("\\nEpoch {{}}".format(epoch))
            train_loader.sampler.set_epoch(epoch)
            for batch in train_loader:
                loss = model(batch).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
    """


def test_a_logger_switched_on_by_a_conditional_rank_flag_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"utils/logger.py": SWITCHED_LOGGER, "utils/__init__.py": "",
                             "train_ddp.py": SWITCHED_SCRIPT.format(flag="True if local_rank == 0 else False")})
    assert finding_set(tmp_path, "train_ddp.py", "utils/logger.py", select="DDP020") == set()


def test_a_logger_switched_on_everywhere_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"utils/logger.py": SWITCHED_LOGGER, "utils/__init__.py": "",
                             "train_ddp.py": SWITCHED_SCRIPT.format(flag="True if local_rank >= 0 else False")})
    assert finding_set(tmp_path, "train_ddp.py", "utils/logger.py", select="DDP020") == \
        {("train_ddp.py", 19, "DDP020")}


GPU_TAGGED = """\
    import logging
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, loader, gpu_id):
            self.gpu_id = gpu_id
            self.loader = loader
            self.model = DDP(Generator().cuda(gpu_id), device_ids=[gpu_id])
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-4)

        def train(self, epochs):
            for epoch in range(epochs):
                for step, (noisy, clean) in enumerate(self.loader, start=1):
                    loss = torch.nn.functional.l1_loss(self.model(noisy.cuda(self.gpu_id)), clean.cuda(self.gpu_id))
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    template = "GPU: {{}}, Epoch {{}}, Step {{}}, loss: {{}}"
                    if step % 100 == 0:
                        logging.info(template.format({who}, epoch, step, loss.item()))


    def worker(rank, world_size):
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        torch.cuda.set_device(rank)
        Trainer(make_loader(rank, world_size), rank).train(50)
        dist.destroy_process_group()


    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO)
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n,), nprocs=n)
    """


def test_loop_logs_that_name_the_gpu_index_are_meant_per_rank(tmp_path) -> None:
    write_project(tmp_path, {"train.py": GPU_TAGGED.format(who="self.gpu_id")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_loop_logs_without_the_gpu_index_are_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": GPU_TAGGED.format(who='"-"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 26, "DDP020")}


UNSET_RANK = """\
    import torch
    import torch.distributed as dist

    from options import parse_options


    def main():
        opt = parse_options()
        rank = opt.local_rank
        show = rank is None or rank == 0
        if rank is not None:
            dist.init_process_group(backend="nccl")
            torch.cuda.set_device(rank)
        model = build_model(opt)
        for epoch in range(1, opt.epochs + 1):
            for data in loader:
                loss = model(data["image"].cuda(), data["label"].cuda())
                model.optimizer.zero_grad()
                loss.backward()
                model.optimizer.step()
            {guard}
                print("end of epoch %d" % epoch)


    if __name__ == "__main__":
        main()
    """

OPTIONS = """\
    import argparse


    def parse_options():
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=None)
        parser.add_argument("--epochs", type=int, default=100)
        return parser.parse_args()
    """


def test_rank_unset_or_zero_is_the_main_process(tmp_path) -> None:
    write_project(tmp_path, {"train.py": UNSET_RANK.format(guard="if show:"), "options.py": OPTIONS})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_rank_unset_or_any_is_every_rank(tmp_path) -> None:
    write_project(tmp_path, {"train.py": UNSET_RANK.format(guard="if rank is None or rank >= 0:"),
                             "options.py": OPTIONS})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 22, "DDP020")}


BARS = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm, trange


    def rollout(policy, n_games, rank):
        games = []
        for _ in tqdm(range(n_games), desc={label}):
            games.append(policy(new_board()))
        return games


    def main():
        rank = int(os.environ["RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        policy = DDP(PolicyNet().cuda())
        optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
        for iteration in range(100):
            games = rollout(policy, 64, rank)
            for step in trange(len(games) // 8{disable}):
                loss = policy_loss(policy, games[step * 8:(step + 1) * 8])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
    """


def test_a_trange_over_the_training_steps_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": BARS.format(disable="", label='f"self-play rank {rank}"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 24, "DDP020")}


def test_a_trange_labelled_with_the_rank_is_meant_per_rank(tmp_path) -> None:
    write_project(tmp_path, {"train.py": BARS.format(disable=', desc=f"train rank {rank}"',
                                                     label='f"self-play rank {rank}"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_a_rollout_bar_handed_the_rank_but_not_naming_it_is_reported(tmp_path) -> None:
    # `rollout(policy, 64, rank)` hands the rank on, but the bar's label never uses it. The
    # caller keeps the games the rollout returns, so the bar is reported, not the call.
    write_project(tmp_path, {"train.py": BARS.format(disable=', desc=f"train rank {rank}"', label='"self-play"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 11, "DDP020")}


def test_a_disabled_trange_and_a_bar_labelled_with_the_rank_are_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": BARS.format(disable=", disable=rank != 0",
                                                     label='f"self-play rank {rank}"')})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


RUN_LOG = """\
    import logging
    import time


    class RunLog:
        def __init__(self, rank):
            self.rank = rank
            self.start = time.time()
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

        def info(self, text, *args):
            took = time.strftime("%H:%M:%S ", time.gmtime(time.time() - self.start))
            if isinstance(text, str):
                text = took + {tag}text
            else:
                logging.info(took)
            logging.info(text, *args)
    """

GAN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from runlog import RunLog


    def fit(model, loader, optimizer, logging, epochs):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for step, x in enumerate(loader):
                optimizer.zero_grad()
                loss = model(x.cuda()).mean()
                loss.backward()
                optimizer.step()
                if step % 50 == 0:
                    line = f"step {{step}}"
                    line += f" loss {{loss.item():.3f}}"
                    logging.info(line)
            logging.info({epoch_message})


    def main(net, loader):
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        log = RunLog(local_rank)
        log.info({{"rank": local_rank}})
        model = DDP(net.cuda(), device_ids=[local_rank])
        fit(model, loader, torch.optim.Adam(model.parameters()), log, 5)
        dist.destroy_process_group()
    """

_TAGGED = 'f"[rank {self.rank}] " + '


def test_a_project_logger_passed_as_logging_that_tags_text_with_the_rank_is_clean(tmp_path):
    gan = GAN.format(epoch_message='"=" * 20 + f" epoch {epoch} done"')
    write_project(tmp_path, {"runlog.py": RUN_LOG.format(tag=_TAGGED), "gan.py": gan})
    assert finding_set(tmp_path, "gan.py", select="DDP020") == set()


def test_a_non_text_message_in_the_loop_takes_the_untagged_branch(tmp_path):
    gan = GAN.format(epoch_message='{"epoch": epoch}')
    write_project(tmp_path, {"runlog.py": RUN_LOG.format(tag=_TAGGED), "gan.py": gan})
    assert finding_set(tmp_path, "gan.py", select="DDP020") == {("gan.py", 22, "DDP020")}


def test_a_project_logger_that_does_not_tag_the_rank_is_reported_in_the_loop(tmp_path):
    gan = GAN.format(epoch_message='f"epoch {epoch} done"')
    write_project(tmp_path, {"runlog.py": RUN_LOG.format(tag=""), "gan.py": gan})
    # (Two calls of one printer in one function are one fix: reported once, at the first.)
    assert finding_set(tmp_path, "gan.py", select="DDP020") == {("gan.py", 21, "DDP020")}
