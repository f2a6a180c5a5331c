"""Loop, accumulation and rank-divergence rules through `ddpcheck lint`, on the ways projects
write them: a logger made with the rank and passed into the training function (DDP020), a model
compiled only on the non-distributed path (DDP024). Each clean variant has a twin that is still
reported."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

# --- DDP020: a rank-tagged logger passed in as a parameter -----------------------------------

LOG_UTILS = """\
    import sys

    from loguru import logger


    def make_logger(rank, world_size):
        logger.remove()
        logger.add(sys.stdout, format="{{time}} | rank {{extra[rank]}}/{{extra[world_size]}} | {{message}}")
        return logger.bind(rank=rank, world_size=world_size)


    def plain_logger():
        logger.remove()
        logger.add(sys.stdout, format="{{time}} | {{message}}")
        return logger
    """

TAGGED_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from log_utils import make_logger, plain_logger


    def fit(model, loader, optimizer, epochs, log):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for images, labels in loader:
                loss = torch.nn.functional.cross_entropy(model(images.cuda()), labels.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            log.info(f"epoch {{epoch}} loss {{loss.item():.3f}}")


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        log = {factory}
        model = DDP(build_model().cuda())
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        fit(model, build_loader(), optimizer, 10, log)


    if __name__ == "__main__":
        main()
    """


def test_a_logger_made_with_the_rank_and_passed_in_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"log_utils.py": LOG_UTILS,
                             "train.py": TAGGED_TRAIN.format(factory="make_logger(rank, dist.get_world_size())")})
    assert finding_set(tmp_path, "train.py", "log_utils.py", select="DDP020") == set()


def test_a_plain_logger_passed_in_is_still_reported(tmp_path) -> None:
    write_project(tmp_path, {"log_utils.py": LOG_UTILS.replace("rank {{extra[rank]}}/{{extra[world_size]}} | ", ""),
                             "train.py": TAGGED_TRAIN.format(factory="plain_logger()")})
    assert finding_set(tmp_path, "train.py", "log_utils.py", select="DDP020") == {("train.py", 18, "DDP020")}


# --- DDP024: torch.compile only on the single-process path -----------------------------------

COMPILE_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def setup(args):
        if "WORLD_SIZE" not in os.environ:
            return False
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return True


    def main(args):
        distributed = setup(args)
        model = Net().cuda()
        if distributed:
            model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])])
        {compile_test}
            model = torch.compile(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer)
            if not distributed or dist.get_rank() == 0:
                torch.save({{"model": model.state_dict(), "epoch": epoch}}, "last.pt")
    """


def test_a_model_compiled_only_without_distribution_is_quiet(tmp_path) -> None:
    write_project(tmp_path, {"train.py": COMPILE_TRAIN.format(compile_test="if not distributed:")})
    assert finding_set(tmp_path, "train.py", select="DDP024") == set()


def test_a_model_compiled_on_every_path_is_still_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": COMPILE_TRAIN.format(compile_test="if args.compile:")})
    assert finding_set(tmp_path, "train.py", select="DDP024") == {("train.py", 27, "DDP024")}
