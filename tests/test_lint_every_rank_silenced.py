"""Console output in training loops (DDP020) that the run keeps off the other ranks in ways
outside the loop, through `ddpcheck lint`: a launcher script of the project that starts each
rank with its stdout sent to the null device on all but the first, a rank reporting its own
failure in an `except` handler, and a project logger whose output check returns a rank-0 test
when an option asks for it. The same code without the silencing is still reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAIN = """\
    import argparse

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--rank", type=int, default=0)
        parser.add_argument("--world_size", type=int, default=1)
        args = parser.parse_args()
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:54321",
                                rank=args.rank, world_size=args.world_size)
        torch.cuda.set_device(args.rank)
        model = DDP(build_model().cuda(), device_ids=[args.rank])
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        for epoch in range(100):
            loader.sampler.set_epoch(epoch)
            for step, batch in enumerate(loader):
                loss = model(batch).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch} loss {loss.item():.4f}")


    if __name__ == "__main__":
        main()
    """

LAUNCHER = """\
    import argparse
    import os
    import pathlib
    import subprocess

    import torch


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--script", type=str)
        args, rest = parser.parse_known_args()
        here = pathlib.Path(__file__).parent.absolute()
        n = torch.cuda.device_count()
        procs = []
        for i in range(n):
            cmd = ["python3", os.path.join(here, args.script), f"--rank={i}", f"--world_size={n}", *rest]
            {out}
            procs.append(subprocess.Popen(cmd, stdout=out))
        for p in procs:
            p.wait()


    if __name__ == "__main__":
        main()
    """


def test_a_launcher_that_sends_the_other_ranks_stdout_to_devnull_silences_prints(tmp_path) -> None:
    write_project(tmp_path, {"bin/train_tts.py": TRAIN,
                             "bin/distribute.py": LAUNCHER.replace("{out}", 'out = None if i == 0 else open(os.devnull, "w")')})
    assert finding_set(tmp_path, "bin/train_tts.py", select="DDP020") == set()


def test_a_launcher_elsewhere_that_names_the_script_silences_prints(tmp_path) -> None:
    launcher = LAUNCHER.replace("{out}", "out = subprocess.DEVNULL if i != 0 else None").replace(
        "os.path.join(here, args.script)", '"train_tts.py"')
    write_project(tmp_path, {"train_tts.py": TRAIN, "tools/launch.py": launcher})
    assert finding_set(tmp_path, "train_tts.py", select="DDP020") == set()


def test_a_launcher_that_keeps_every_ranks_stdout_leaves_prints_reported(tmp_path) -> None:
    write_project(tmp_path, {"bin/train_tts.py": TRAIN,
                             "bin/distribute.py": LAUNCHER.replace("{out}", 'out = None  # os.devnull was too quiet')})
    assert finding_set(tmp_path, "bin/train_tts.py", select="DDP020") == {("train_tts.py", 25, "DDP020")}


def test_a_launcher_for_another_project_leaves_prints_reported(tmp_path) -> None:
    launcher = LAUNCHER.replace("{out}", 'out = None if i == 0 else open(os.devnull, "w")').replace(
        "os.path.join(here, args.script)", '"serve/worker.py"')
    write_project(tmp_path, {"train_tts.py": TRAIN, "tools/launch.py": launcher})
    assert finding_set(tmp_path, "train_tts.py", select="DDP020") == {("train_tts.py", 25, "DDP020")}


def test_a_script_torchrun_can_start_is_reported_despite_the_launcher(tmp_path) -> None:
    train = TRAIN.replace('parser.add_argument("--rank", type=int, default=0)',
                          'parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)))'
                          ).replace("import argparse", "import argparse\n    import os")
    write_project(tmp_path, {"bin/train_tts.py": train,
                             "bin/distribute.py": LAUNCHER.replace("{out}", 'out = None if i == 0 else open(os.devnull, "w")')})
    assert finding_set(tmp_path, "bin/train_tts.py", select="DDP020") == {("train_tts.py", 26, "DDP020")}


HANDLER = """\
    import os
    import traceback

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = DDP(build_model().cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    it = iter(loader)
    for step in range(10000):
        try:
            batch = next(it)
        {caught}
            print(f"step {{step}}: {{sys.exc_info()[1]}}")
            print(traceback.format_exc())
            it = iter(loader)
            continue
        loss = model(batch).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if local_rank == 0 and step % 100 == 0:
            print(f"step {{step}} loss {{loss.item():.4f}}")
    """


def test_a_rank_printing_its_own_error_in_a_handler_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": HANDLER.format(caught="except Exception:")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == set()


def test_a_message_at_the_end_of_each_pass_over_the_loader_is_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": HANDLER.format(caught="except StopIteration:")})
    assert finding_set(tmp_path, "train.py", select="DDP020") == {("train.py", 18, "DDP020"), ("train.py", 19, "DDP020")}


OPTION_LOGGER = """\
    import datetime

    import torch.distributed as dist


    def is_main_process():
        return not dist.is_initialized() or dist.get_rank() == 0


    class Logger:
        def __init__(self, config):
            self.only_main = config["ONLY_MAIN_PROCESS"]

        def info(self, msg):
            self._console(f"[{datetime.datetime.now():%H:%M:%S}] [INFO] {msg}")

        def _console(self, msg):
            if not self._can_log():
                return
            print(msg)

        def _can_log(self):
            {body}
    """

OPTION_SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    import yaml
    from torch.nn.parallel import DistributedDataParallel as DDP

    from logger import Logger


    def main():
        config = yaml.safe_load(open("config.yaml"))
        logger = Logger(config)
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=config["LR"])
        for epoch in range(config["EPOCHS"]):
            train_loader.sampler.set_epoch(epoch)
            for images, labels in train_loader:
                loss = torch.nn.functional.cross_entropy(model(images.cuda()), labels.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            logger.info(f"epoch {epoch + 1} loss {loss.item():.4f}")


    if __name__ == "__main__":
        main()
    """


def test_a_logger_whose_check_returns_a_rank_test_under_an_option_is_quiet(tmp_path) -> None:
    body = "if self.only_main:\n                return is_main_process()\n            return True"
    write_project(tmp_path, {"logger.py": OPTION_LOGGER.replace("{body}", body), "train.py": OPTION_SCRIPT})
    assert finding_set(tmp_path, "train.py", "logger.py", select="DDP020") == set()


def test_a_logger_whose_check_ignores_the_rank_is_reported(tmp_path) -> None:
    body = "return self.only_main is not None"
    write_project(tmp_path, {"logger.py": OPTION_LOGGER.replace("{body}", body), "train.py": OPTION_SCRIPT})
    assert finding_set(tmp_path, "train.py", "logger.py", select="DDP020") == {("train.py", 26, "DDP020")}
