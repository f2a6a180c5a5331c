"""Output on every rank (DDP020) in the handler of a `try` that clips the gradients with
`error_if_nonfinite=True`: DDP averaged the gradients, so every rank raises the same error and
logs the same warning (not a rank reporting a failure of its own). Through `ddpcheck lint`, with
the clean variants of a handler around a rank's own work."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


SCRIPT = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    logging.basicConfig(level=logging.INFO)
    log = logging.getLogger(__name__)


    def main():
        dist.init_process_group("nccl")
        gpu = int(os.environ["LOCAL_RANK"])
        net = DistributedDataParallel(build().cuda(gpu), device_ids=[gpu])
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
        scaler = torch.cuda.amp.GradScaler()
        loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
        for epoch in range(20):
            for batch in loader:
                with torch.autocast("cuda"):
                    loss = net(batch.cuda(gpu)).mean()
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                try:
                    {body}
                except RuntimeError:
                    log.warning("skipping this step")
                scaler.update()


    if __name__ == "__main__":
        main()
"""


def test_warning_for_an_error_of_the_averaged_gradients_is_reported(tmp_path: Path) -> None:
    body = ("torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, error_if_nonfinite=True)\n"
            "                    scaler.step(optimizer)")
    assert lines(tmp_path, {"train.py": SCRIPT.format(body=body)}, "DDP020") == [("train.py", 30)]


def test_warning_for_a_clip_that_does_not_raise_is_clean(tmp_path: Path) -> None:
    # Without `error_if_nonfinite=True` the clip raises nothing: whatever fails is this rank's.
    body = ("torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)\n"
            "                    scaler.step(optimizer)")
    assert lines(tmp_path, {"train.py": SCRIPT.format(body=body)}, "DDP020") == []


def test_warning_for_a_rank_s_own_step_is_clean(tmp_path: Path) -> None:
    assert lines(tmp_path, {"train.py": SCRIPT.format(body="scaler.step(optimizer)")}, "DDP020") == []
