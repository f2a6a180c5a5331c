"""A loop that runs its backward inside a `try` whose handler for an error one rank meets on
its own (a CUDA out-of-memory) `continue`s: the rank that failed never finishes that backward
while the others all-reduce theirs (DDP035), through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

# Micro-batches of one step: a method back-propagates each, the step follows the loop.
MICRO_LOOP = """\
    import math

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Runner:
        def __init__(self, net, optimizer, local_rank, chunk):
            self.model = DDP(net.cuda(local_rank), device_ids=[local_rank])
            self.optimizer = optimizer
            self.chunk = chunk

        def micro_step(self, xs, idx, count):
            self.model.require_backward_grad_sync = idx == count - 1
            loss = self.model(xs.cuda()).mean() / count
            loss.backward()

        def step(self, batch):
            parts = torch.split(batch, self.chunk)
            skipped = 0
            for idx, xs in enumerate(parts):
                try:
                    BODY
                except HANDLED:
                    torch.cuda.empty_cache()
                    skipped += 1
                    continue
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            return skipped


    def main(loader, net, optimizer, local_rank):
        runner = Runner(net, optimizer, local_rank, 4)
        for batch in loader:
            runner.step(batch)
    """


def _lint(tmp_path, body: str, handled: str = "torch.cuda.OutOfMemoryError") -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"runner.py": MICRO_LOOP.replace("BODY", body).replace("HANDLED", handled)})
    return finding_set(tmp_path, "runner.py", select="DDP035")


def test_skipping_a_micro_batch_whose_backward_failed_on_this_rank_is_reported(tmp_path):
    assert _lint(tmp_path, "self.micro_step(xs, idx, len(parts))") == {("runner.py", 28, "DDP035")}


def test_a_runtime_error_handler_is_one_too(tmp_path):
    assert _lint(tmp_path, "self.micro_step(xs, idx, len(parts))", "RuntimeError") == {("runner.py", 28, "DDP035")}


def test_an_error_no_rank_meets_alone_is_clean(tmp_path):
    # A malformed sample's KeyError is not what the rule knows to be a rank's own event.
    assert _lint(tmp_path, "self.micro_step(xs, idx, len(parts))", "KeyError") == set()


def test_a_try_around_the_logging_after_the_backward_is_clean(tmp_path):
    # Only the logging can fail inside the `try`: the micro-batch's backward has already run.
    text = MICRO_LOOP.replace("BODY", "print(torch.cuda.memory_allocated())").replace(
        "HANDLED", "torch.cuda.OutOfMemoryError").replace(
        "            for idx, xs in enumerate(parts):\n",
        "            for idx, xs in enumerate(parts):\n                self.micro_step(xs, idx, len(parts))\n")
    write_project(tmp_path, {"runner.py": text})
    assert finding_set(tmp_path, "runner.py", select="DDP035") == set()
