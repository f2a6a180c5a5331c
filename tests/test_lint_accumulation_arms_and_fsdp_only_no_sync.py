"""Gradient accumulation without `no_sync` read the ways trainers write it: an AMP arm and a
plain arm of one `if`, each stepping on the accumulation counter (one place to fix, reported at
the first arm; the step of the other arm is never this pass's), and a `no_sync` used only under
`isinstance(model, FSDP)`, which leaves the DDP model syncing every micro-batch. Through
`ddpcheck lint` on small projects; variants that avoid the sync stay clean."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines

ARMS = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_epoch(conf):
        conf.model.train()
        for batch_idx, (inputs, targets) in enumerate(conf.train_loader):
            conf.optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", enabled=conf.half, dtype=torch.bfloat16):
                loss = conf.criterion(conf.model(inputs.cuda()), targets.cuda())
                if conf.grad_accum is not None:
                    loss /= conf.grad_accum
            if conf.half:
                loss = conf.scaler.scale(loss)
                loss.backward()
                if conf.grad_accum is None or (batch_idx + 1) % conf.grad_accum == 0:
                    conf.scaler.step(conf.optimizer)
                    conf.scaler.update()
            else:
                loss.backward()
                if conf.grad_accum is None or (batch_idx + 1) % conf.grad_accum == 0:
                    conf.optimizer.step()


    def main(conf):
        dist.init_process_group("nccl")
        conf.model = DDP(conf.model.cuda(), device_ids=[conf.local_rank])
        for epoch in range(conf.epochs):
            train_epoch(conf)
"""


def test_an_amp_arm_and_a_plain_arm_are_one_finding_at_the_first(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": ARMS}, "DDP016") == [("train.py", 16)]


def test_arms_that_step_every_batch_are_clean(tmp_path: Path) -> None:
    every = ARMS.replace("if conf.grad_accum is None or (batch_idx + 1) % conf.grad_accum == 0:", "if True:")
    assert lines(tmp_path, {"train.py": every}, "DDP016") == []


FSDP_ONLY = """\
    from contextlib import nullcontext

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_one_epoch(model, loader, optimizer, args):
        for inputs, targets in loader:
            optimizer.zero_grad()
            chunk = inputs.shape[0] // args.accum_freq
            for ii in range(args.accum_freq):
                maybe_no_sync = nullcontext
                if isinstance(model, FSDP) and ii != args.accum_freq - 1:
                    maybe_no_sync = model.no_sync
                with maybe_no_sync():
                    part = slice(ii * chunk, (ii + 1) * chunk)
                    loss = torch.nn.functional.cross_entropy(model(inputs[part]), targets[part])
                    (loss / args.accum_freq).backward()
            optimizer.step()


    def main(args, net, loader):
        dist.init_process_group("nccl")
        model = FSDP(net) if args.fsdp else DDP(net.cuda(), device_ids=[args.local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer, args)
"""


def test_no_sync_only_for_fsdp_leaves_the_ddp_model_syncing(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": FSDP_ONLY}, "DDP016") == [("train.py", 20)]


def test_no_sync_for_both_wrappers_is_clean(tmp_path: Path) -> None:
    both = FSDP_ONLY.replace("isinstance(model, FSDP)", "isinstance(model, (FSDP, DDP))")
    assert lines(tmp_path, {"train.py": both}, "DDP016") == []
