"""Gradient accumulation that still all-reduces every micro-batch, through `ddpcheck lint --select
DDP016`: a `with model.no_sync():` around the loss alone (the forward before it, the backward
after it), a step under `if should_step or is_last:`, and a trainer whose `train_step()`
back-propagates while the loop calls its `apply_update()` on a counter. Clean variants (the
forward and backward inside `no_sync`, a step after every backward) stay clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str = "DDP016") -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


LOSS_ONLY = """\
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel


    class Restorer:
        def __init__(self, net, rank, micro):
            dist.init_process_group("nccl")
            self.model = DistributedDataParallel(net.cuda(rank), device_ids=[rank])
            self.optimizer = torch.optim.Adam(self.model.parameters())
            self.micro = micro

        def criterion(self, pred, target):
            return F.l1_loss(pred, target)

        def train_step(self, batch):
            total = batch["lq"].shape[0]
            self.optimizer.zero_grad()
            for start in range(0, total, self.micro):
                part = {k: v[start:start + self.micro] for k, v in batch.items()}
                last = start + self.micro >= total
                pred = self.model(part["lq"])
                if last:
                    loss = self.criterion(pred, part["gt"])
                else:
                    with self.model.no_sync():
                        loss = self.criterion(pred, part["gt"])
                loss.backward()
            self.optimizer.step()
"""


def test_no_sync_around_the_loss_alone_still_syncs_every_micro_batch(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, {"restore.py": LOSS_ONLY}, "restore.py", select="DDP016")) == [
        ("restore.py", 29)]


def test_no_sync_around_the_forward_skips_the_sync(tmp_path: Path) -> None:
    inside = LOSS_ONLY.replace(
        "                pred = self.model(part[\"lq\"])\n"
        "                if last:\n"
        "                    loss = self.criterion(pred, part[\"gt\"])\n"
        "                else:\n"
        "                    with self.model.no_sync():\n"
        "                        loss = self.criterion(pred, part[\"gt\"])\n"
        "                loss.backward()\n",
        "                if last:\n"
        "                    loss = self.criterion(self.model(part[\"lq\"]), part[\"gt\"])\n"
        "                    loss.backward()\n"
        "                else:\n"
        "                    with self.model.no_sync():\n"
        "                        loss = self.criterion(self.model(part[\"lq\"]), part[\"gt\"])\n"
        "                        loss.backward()\n")
    assert inside != LOSS_ONLY
    assert _lines(lint_project(tmp_path, {"restore.py": inside}, "restore.py", select="DDP016")) == []


def test_no_sync_around_a_call_the_analysis_cannot_follow_is_trusted(tmp_path: Path) -> None:
    # `run()` is a partial holding the model: its forward may well be inside the block.
    partial = LOSS_ONLY.replace(
        "                    with self.model.no_sync():\n"
        "                        loss = self.criterion(pred, part[\"gt\"])\n",
        "                    run = functools.partial(self.criterion, self.model(part[\"lq\"]))\n"
        "                    with self.model.no_sync():\n"
        "                        loss = run(part[\"gt\"])\n").replace("import torch\n", "import functools\n\n    import torch\n", 1)
    assert partial != LOSS_ONLY
    assert _lines(lint_project(tmp_path, {"restore.py": partial}, "restore.py", select="DDP016")) == []


STEP_OR_LAST = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler


    def fit(net, data, accum_steps, rank):
        dist.init_process_group("nccl")
        model = DistributedDataParallel(net.cuda(rank), device_ids=[rank])
        optimizer = torch.optim.AdamW(model.parameters())
        loader = DataLoader(data, sampler=DistributedSampler(data), batch_size=4)
        total = len(loader)
        for it, batch in enumerate(loader):
            loss = model(batch.cuda(rank)).mean() / accum_steps
            loss.backward()
            should_step = (it + 1) % accum_steps == 0
            is_last = it + 1 == total
            if should_step or is_last:
                optimizer.step()
                optimizer.zero_grad()
"""


def test_a_counter_test_joined_with_the_last_batch_still_accumulates(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, {"fit.py": STEP_OR_LAST}, "fit.py", select="DDP016")) == [("fit.py", 15)]
    every = STEP_OR_LAST.replace("if should_step or is_last:", "if True:")
    assert _lines(lint_project(tmp_path, {"fit.py": every}, "fit.py", select="DDP016")) == []


HELPER_STEP = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    class Engine:
        def __init__(self, net, rank, opts):
            self.model = DistributedDataParallel(net.cuda(rank), device_ids=[rank])
            self.optimizer = torch.optim.AdamW(self.model.parameters())
            self.opts = opts
            self.steps = 0

        def train_step(self, batch):
            self.steps += 1
            loss = self.model(batch).mean() / self.opts.update_every
            loss.backward()
            return loss

        def apply_update(self):
            self.optimizer.step()
            self.optimizer.zero_grad()


    def worker(rank, net, opts, batches):
        dist.init_process_group("nccl", rank=rank, world_size=opts.world)
        engine = Engine(net, rank, opts)
        for batch in batches:
            engine.train_step(batch)
            if engine.steps % opts.update_every == 0:
                engine.apply_update()
"""


def test_a_helper_step_on_a_counter_after_a_helper_backward_accumulates(tmp_path: Path) -> None:
    assert _lines(lint_project(tmp_path, {"engine.py": HELPER_STEP}, "engine.py", select="DDP016")) == [
        ("engine.py", 16)]
    every = HELPER_STEP.replace("            if engine.steps % opts.update_every == 0:\n                engine.apply_update()",
                                "            engine.apply_update()")
    assert every != HELPER_STEP
    assert _lines(lint_project(tmp_path, {"engine.py": every}, "engine.py", select="DDP016")) == []
