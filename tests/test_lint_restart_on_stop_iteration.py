"""A loader started over in an `except StopIteration:` handler (step-based training that draws
batches with `next()`): each restart is an epoch, and the finding is at the restart, where the
`set_epoch` belongs (DDP002). Through `ddpcheck lint` on a small project."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

TRAINER = """\
    import torch
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def __init__(self, model, optimizer, dataset, grad_accum_steps):
            self.model = model
            self.optimizer = optimizer
            self.grad_accum_steps = grad_accum_steps
            self.sampler = DistributedSampler(dataset, shuffle=True)
            self.loader = DataLoader(dataset, batch_size=8, sampler=self.sampler)
            self.batches = iter(self.loader)
            self.epoch = 0

        def _get_batch(self):
            try:
                return next(self.batches)
            except StopIteration:
                {restart}
                return next(self.batches)

        def train(self, max_steps):
            for step in range(max_steps):
                self.optimizer.zero_grad()
                for _ in range(self.grad_accum_steps):
                    x, y = self._get_batch()
                    loss = torch.nn.functional.mse_loss(self.model(x), y) / self.grad_accum_steps
                    loss.backward()
                self.optimizer.step()
    """

MAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainer import Trainer


    def main(dataset):
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * dist.get_world_size())
        Trainer(model, optimizer, dataset, 4).train(10_000)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(None)
    """


def test_a_restart_on_stop_iteration_without_set_epoch_is_reported_at_the_restart(tmp_path):
    _write(tmp_path, {"trainer.py": TRAINER.replace("{restart}", "self.batches = iter(self.loader)"),
                      "main.py": MAIN})
    assert _findings(tmp_path, "main.py", select="DDP002") == {("trainer.py", 19, "DDP002")}


def test_a_restart_that_sets_the_next_epoch_is_clean(tmp_path):
    restart = ("self.epoch += 1\n            self.sampler.set_epoch(self.epoch)\n"
               "            self.batches = iter(self.loader)")
    _write(tmp_path, {"trainer.py": TRAINER.replace("{restart}", restart), "main.py": MAIN})
    assert _findings(tmp_path, "main.py", select="DDP002") == set()
