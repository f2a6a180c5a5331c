"""The module inside DDP reached in ways trainers write it, through `ddpcheck lint`: a wrapper kept
only for its `.module`, a loss method held in a variable (`loss_fn = loss_fn or
self.model.calculate_loss`), and a helper that unwraps what it is handed with an `if` that has no
`else` (`if type(model) == DDP: model = model.module`) and then calls `model.forward(...)`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[tuple[str, int]]:
    return sorted((Path(f["path"]).name, f["location"]["line"]) for f in findings if f["code"] == code)


TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    class PretrainTrainer:
        def __init__(self, model, rank):
            self.model = model
            self.rank = self._build_distribute(rank)

        def _build_distribute(self, rank):
            dist.init_process_group("nccl")
            torch.cuda.set_device(rank)
            self.model.to(rank)
            self.model = DistributedDataParallel(self.model, device_ids=[rank]).module
            return rank

        def train_epoch(self, loader, optimizer, loss_func=None):
            loss_func = loss_func or self.model.calculate_loss
            for batch in loader:
                optimizer.zero_grad()
                loss = loss_func(batch)
                loss.backward()
                optimizer.step()
"""

TRAIN_MAIN = """\
    import torch
    import torch.distributed as dist

    from trainer import PretrainTrainer


    class SeqModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def calculate_loss(self, batch):
            return self.fc(batch).pow(2).mean()


    def main():
        trainer = PretrainTrainer(SeqModel(), 0)
        optimizer = torch.optim.Adam(trainer.model.parameters())
        for epoch in range(3):
            trainer.train_epoch([torch.randn(4, 8)], optimizer)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_a_wrapper_kept_only_for_its_module_trains_the_plain_module(tmp_path: Path) -> None:
    files = {"trainer.py": TRAINER, "train.py": TRAIN_MAIN}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP013"), "DDP013") == [("trainer.py", 22)]


def test_the_wrapper_kept_is_called_through_the_same_variable(tmp_path: Path) -> None:
    # The wrapper is kept, and the step is handed it: `loss_func` is DDP's forward.
    kept = TRAINER.replace("device_ids=[rank]).module", "device_ids=[rank])")
    main = TRAIN_MAIN.replace("trainer.train_epoch([torch.randn(4, 8)], optimizer)",
                              "trainer.train_epoch([torch.randn(4, 8)], optimizer, loss_func=trainer.model)")
    files = {"trainer.py": kept, "train.py": main}
    assert _lines(lint_project(tmp_path, files, "train.py", select="DDP013"), "DDP013") == []


RUN_EPOCH = """\
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def run_epoch(batch, model, criterion):
        if type(model) == torch.nn.parallel.DistributedDataParallel:
            model = model.module
        out = model.forward(batch)
        return criterion(out)


    def worker(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = DDP(torch.nn.Linear(8, 8))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10):
            optimizer.zero_grad()
            loss = run_epoch(torch.randn(4, 8), model, lambda out: out.pow(2).mean())
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
"""


def test_a_helper_that_unwraps_what_it_is_handed_runs_the_inner_module(tmp_path: Path) -> None:
    found = _lines(lint_project(tmp_path, {"train.py": RUN_EPOCH}, "train.py", select="DDP013"), "DDP013")
    assert found == [("train.py", 10)]
    spelled = RUN_EPOCH.replace("if type(model) == torch.nn.parallel.DistributedDataParallel:",
                                "if isinstance(model, DDP):").replace("model.forward(batch)", "model(batch)")
    found = _lines(lint_project(tmp_path, {"train.py": spelled}, "train.py", select="DDP013"), "DDP013")
    assert found == [("train.py", 10)]


def test_a_helper_that_unwraps_only_data_parallel_runs_the_ddp_wrapper(tmp_path: Path) -> None:
    other = RUN_EPOCH.replace("if type(model) == torch.nn.parallel.DistributedDataParallel:",
                              "if isinstance(model, torch.nn.DataParallel):")
    assert _lines(lint_project(tmp_path, {"train.py": other}, "train.py", select="DDP013"), "DDP013") == []
