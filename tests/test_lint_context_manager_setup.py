"""A process group made by a context manager's `__enter__` (`with DistContext(): train()`) is
the script's: `with` runs the class's `__enter__` and `__exit__` (DDP005 reads the teardown from
`__exit__`). Through `ddpcheck lint` on a small project."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

CONTEXT = """\
    import os

    import torch
    import torch.distributed as dist


    class DistContext:
        def __init__(self, backend="nccl"):
            self.backend = backend

        def __enter__(self):
            dist.init_process_group(self.backend)
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            return self

        def __exit__(self, exc_type, exc, tb):
            {teardown}
            return False
    """

TRAIN = """\
    import os

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dist_context import DistContext


    def train():
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(10):
            optimizer.zero_grad()
            model(torch.randn(8, 4).cuda()).sum().backward()
            optimizer.step()


    if __name__ == "__main__":
        with DistContext():
            train()
    """


def _lint(tmp_path, teardown):
    _write(tmp_path, {"dist_context.py": CONTEXT.replace("{teardown}", teardown), "train.py": TRAIN})
    return _findings(tmp_path, "train.py", select="DDP005")


def test_a_group_made_on_entry_and_never_destroyed_is_reported(tmp_path):
    assert _lint(tmp_path, "pass") == {("dist_context.py", 12, "DDP005")}


def test_a_group_destroyed_on_exit_is_clean(tmp_path):
    assert _lint(tmp_path, "dist.destroy_process_group()") == set()
