"""Output on every rank (DDP020), on mechanisms seen on public scripts of batch 26: each through
`ddpcheck lint` on a small project written in the style of the scripts, with clean variants."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# A pruning run that converts and stops early when a finished file is there, then trains with a
# progress bar per epoch (shorter in the epoch it resumes) and prints at some steps.
PRUNE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from tqdm import tqdm


    def train_one_step(model, data, label, optimizer):
        loss = torch.nn.functional.cross_entropy(model(data), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss


    def train_main(local_rank, output_dir, max_epochs=10, iters_per_epoch=100):
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 4).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        {exit}
        iteration = 0
        done_epochs = iteration // iters_per_epoch
        for epoch in range(done_epochs, max_epochs):
            if epoch == done_epochs:
                pbar = tqdm(range(iters_per_epoch - iteration % iters_per_epoch){bar})
            else:
                pbar = tqdm(range(iters_per_epoch){bar})
            pbar.set_description("Train epoch {{}}".format(epoch))
            for _ in pbar:
                if iteration > 50 and iteration % 10 == 0:
                    print("update mask at iter ", iteration)
                data = torch.randn(16, 8).cuda()
                label = torch.randint(0, 4, (16,)).cuda()
                train_one_step(model, data, label, optimizer)
                iteration += 1
        dist.destroy_process_group()


    if __name__ == "__main__":
        train_main(int(os.environ["LOCAL_RANK"]), "out")
"""

EARLY_EXIT = """if os.path.exists(os.path.join(output_dir, "finish.pt")):
            model.load_state_dict(torch.load(os.path.join(output_dir, "finish.pt"), map_location="cpu"))
            return"""


def _prune(exit: str = "", bar: str = "") -> dict[str, str]:
    return {"train.py": PRUNE.format(exit=exit, bar=bar)}


def test_output_after_an_early_exit_on_a_finished_file_is_reported(tmp_path: Path) -> None:
    # The loop runs while the finished file is missing: at each step of the whole run, not once.
    files = _prune(exit=EARLY_EXIT, bar=", disable=dist.get_rank() != 0")
    assert lines(tmp_path, files, "DDP020") == [("train.py", 35)]


def test_print_while_a_missing_file_is_made_stays_silent(tmp_path: Path) -> None:
    files = {"train.py": PRUNE.replace('print("update mask at iter ", iteration)', "pass").format(
        exit='if not os.path.exists("data.bin"):\n            print("Downloading data.bin")\n'
             '            torch.save(torch.randn(8), "data.bin")',
        bar=", disable=dist.get_rank() != 0")}
    assert lines(tmp_path, files, "DDP020") == []


def test_bars_made_in_the_resumed_epoch_and_the_others_are_reported(tmp_path: Path) -> None:
    # The bar made at one value of the epoch (`if epoch == done_epochs:`) still draws every step.
    files = {"train.py": PRUNE.replace('print("update mask at iter ", iteration)', "pass").format(
        exit="", bar="")}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 27), ("train.py", 29)]


def test_bars_disabled_off_rank_zero_stay_silent(tmp_path: Path) -> None:
    files = {"train.py": PRUNE.replace('print("update mask at iter ", iteration)', "pass").format(
        exit="", bar=", disable=dist.get_rank() != 0")}
    assert lines(tmp_path, files, "DDP020") == []


def test_message_at_the_first_epoch_only_stays_silent(tmp_path: Path) -> None:
    files = {"train.py": PRUNE.replace(
        'pbar = tqdm(range(iters_per_epoch - iteration % iters_per_epoch){bar})',
        'print("resuming at", iteration)\n                pbar = range(iters_per_epoch)').replace(
        'pbar = tqdm(range(iters_per_epoch){bar})', 'pbar = range(iters_per_epoch)').replace(
        'pbar.set_description("Train epoch {{}}".format(epoch))', "").replace(
        'print("update mask at iter ", iteration)', "pass").format(exit="")}
    assert lines(tmp_path, files, "DDP020") == []


# A point-cloud trainer (spawned workers) that validates every few epochs on every rank; the
# validation functions compute metrics, print them, and hand them back to the caller.
PC_TRAIN = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from datasets import get_clf_datasets
    from utils import validate


    def main_worker(gpu, ngpus_per_node, epochs=100, val_freq=10):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:9991", world_size=ngpus_per_node, rank=gpu)
        torch.cuda.set_device(gpu)
        model = DDP(torch.nn.Linear(3, 3).cuda(gpu), device_ids=[gpu])
        data = torch.utils.data.TensorDataset(torch.randn(64, 3))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        test_loader = DataLoader(data, batch_size=8)
        clf_loaders = {k: [DataLoader(ds, batch_size=8) for ds in pair] for k, pair in get_clf_datasets().items()}
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for (x,) in loader:
                loss = model(x.cuda(gpu)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            if (epoch + 1) % val_freq == 0:
                validate(test_loader, model, clf_loaders)
        dist.destroy_process_group()


    def main():
        ngpus_per_node = torch.cuda.device_count()
        mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node,))


    if __name__ == "__main__":
        main()
"""

PC_UTILS = """\
    import sys
    from pprint import pprint

    import numpy as np
    import torch


    def validate_classification(loaders, model):
        train_loader, test_loader = loaders

        def _make_iter_(loader):
            iterator = iter(loader)
            return iterator

        feats = []
        for data in _make_iter_(test_loader):
            feats.append(model.module.encode(data[0].cuda()).cpu().numpy())
        acc = float(np.mean(np.concatenate(feats) > 0)) * 100.0
        res = {{"acc": acc}}
        print("Acc:%s" % acc)
        return res


    def validate_sample(loader, model):
        all_sample = []
        for data in loader:
            all_sample.append(model(data[0].cuda()))
        res = {{"mean": torch.cat(all_sample).mean().item()}}
        {pprint}
        return res


    def validate(test_loader, model, clf_loaders):
        model.eval()
        for name, loaders in clf_loaders.items():
            with torch.no_grad():
                {clf}
        with torch.no_grad():
            sample_res = validate_sample(test_loader, model)
        model.train()
        return sample_res
"""


PC_DATA = """\
    import torch


    def get_clf_datasets():
        return {"modelnet": [torch.utils.data.TensorDataset(torch.randn(32, 3)) for _ in range(2)]}
"""


def _pc(pprint: str = "pprint(res)", clf: str = "clf_res = validate_classification(loaders, model)"
        ) -> dict[str, str]:
    return {"train.py": PC_TRAIN, "utils.py": PC_UTILS.format(pprint=pprint, clf=clf), "datasets.py": PC_DATA}


def test_pprint_of_the_metrics_and_the_print_of_a_validation_that_returns_them(tmp_path: Path) -> None:
    # `clf_res = validate_classification(...)`: the caller goes on with what it computes, so the
    # guard goes on the print, not around the call.
    assert lines(tmp_path, _pc(), "DDP020") == [("utils.py", 20), ("utils.py", 29)]


def test_pprint_to_a_file_stays_silent(tmp_path: Path) -> None:
    files = _pc(pprint='pprint(res, stream=open("val.txt", "a"))', clf="pass")
    assert lines(tmp_path, files, "DDP020") == []


def test_printing_function_whose_result_is_dropped_is_reported_at_its_call(tmp_path: Path) -> None:
    # Nothing the caller uses comes back: the guard goes around the call, where it is reported.
    files = _pc(pprint="pass", clf="validate_classification(loaders, model)")
    assert lines(tmp_path, files, "DDP020") == [("utils.py", 37)]


# A script whose root logger only a project factory would configure: defined in a helper module
# beside it, called (or not) by the script.
LOG_TRAIN = """\
    import os
    from logging import getLogger

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from log_setup import create_logger

    logger = getLogger()


    def main():
        dist.init_process_group("nccl")
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank % torch.cuda.device_count())
        {setup}
        model = DDP(torch.nn.Linear(8, 1).cuda())
        data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        sampler = DistributedSampler(data)
        loader = DataLoader(data, batch_size=8, sampler=sampler)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            logger.info(f"Start training epoch: {{epoch}}")
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                opt.zero_grad()
                loss.backward()
                opt.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

LOG_SETUP = """\
    import logging


    def create_logger(filepath):
        logger = logging.getLogger()
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.StreamHandler())
        logger.addHandler(logging.FileHandler(filepath))
        return logger
"""


def test_info_with_a_logger_factory_never_called_stays_silent(tmp_path: Path) -> None:
    # The factory's `def` line configures nothing: the root logger keeps WARNING on every rank.
    files = {"train.py": LOG_TRAIN.format(setup="pass"), "log_setup.py": LOG_SETUP}
    assert lines(tmp_path, files, "DDP020") == []


def test_info_with_a_logger_factory_called_on_every_rank_is_reported(tmp_path: Path) -> None:
    files = {"train.py": LOG_TRAIN.format(setup='create_logger("train.log")'), "log_setup.py": LOG_SETUP}
    assert lines(tmp_path, files, "DDP020") == [("train.py", 26)]
