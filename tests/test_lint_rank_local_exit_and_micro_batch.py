"""Two ways one rank leaves the others waiting, through `ddpcheck lint` (DDP035): a clean exit
(`quit()`) on a NaN test of the rank's own loss in the training loop, and a micro-batch loop
that skips with `continue` when the model returns nothing for the rank's own slice of the batch
(`if out == None: continue`), before the loss all-reduces and backward the other ranks make."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

QUIT = """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_epoch(model, loader, optimizer, scaler, device):
        for step, (mix, target) in enumerate(loader):
            with torch.autocast("cuda"):
                estimate = model(mix.to(device))
            loss = F.l1_loss(estimate, target.to(device))
            if torch.logical_or(loss.isnan(), loss.isinf()):
                print("nan training loss; aborting")
                quit()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(build().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.cuda.amp.GradScaler()
        for epoch in range(10):
            train_epoch(model, make_loader(epoch), optimizer, scaler, local_rank)
        dist.destroy_process_group()
    """

MICRO = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, loader, rank, accumulation):
            self.rank = rank
            self.model = DDP(model.to(rank), device_ids=[rank])
            self.loader = loader
            self.accumulation = accumulation
            self.optimizer = torch.optim.AdamW(self.model.parameters())

        def train(self):
            for batch in self.loader:
                positions = list(range(len(batch["x"])))
                total = 0.0
                for j in range(self.accumulation):
                    picked = positions[j::self.accumulation]
                    part = {key: batch[key][picked] for key in batch}
                    out = self.model(part)
                    if out == None:
                        continue
                    loss = out["loss"].detach().clone()
                    dist.all_reduce(loss)
                    total += loss.item()
                    (out["loss"] / self.accumulation).backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
    """


def test_quit_on_the_ranks_own_nan_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"train.py": QUIT})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 16, "DDP035")}


def test_sys_exit_zero_reported_and_nonzero_clean(tmp_path: Path) -> None:
    zero = QUIT.replace("                quit()\n", "                sys.exit(0)\n").replace("    import os\n", "    import os\n    import sys\n")
    write_project(tmp_path, {"train.py": zero})
    assert finding_set(tmp_path, "train.py", select="DDP035") == {("train.py", 17, "DDP035")}
    failing = zero.replace("sys.exit(0)", "sys.exit(1)")
    write_project(tmp_path, {"train.py": failing})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_quit_after_the_flag_is_all_reduced_clean(tmp_path: Path) -> None:
    agreed = QUIT.replace(
        "            if torch.logical_or(loss.isnan(), loss.isinf()):\n",
        "            bad = torch.isnan(loss.detach()).float()\n"
        "            dist.all_reduce(bad)\n"
        "            if bad.item() > 0:\n")
    write_project(tmp_path, {"train.py": agreed})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_quit_on_an_epoch_count_clean(tmp_path: Path) -> None:
    counted = QUIT.replace("            if torch.logical_or(loss.isnan(), loss.isinf()):\n",
                           "            if step > 10_000:\n")
    write_project(tmp_path, {"train.py": counted})
    assert finding_set(tmp_path, "train.py", select="DDP035") == set()


def test_micro_batch_without_output_skipped_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"trainer.py": MICRO})
    assert finding_set(tmp_path, "trainer.py", select="DDP035") == {("trainer.py", 23, "DDP035")}


def test_micro_batch_is_none_spelling_reported(tmp_path: Path) -> None:
    write_project(tmp_path, {"trainer.py": MICRO.replace("out == None", "out is None")})
    assert finding_set(tmp_path, "trainer.py", select="DDP035") == {("trainer.py", 23, "DDP035")}


def test_skip_on_a_configured_option_clean(tmp_path: Path) -> None:
    configured = MICRO.replace("                    if out == None:\n",
                               "                    if self.accumulation == None:\n")
    write_project(tmp_path, {"trainer.py": configured})
    assert finding_set(tmp_path, "trainer.py", select="DDP035") == set()
