"""Early stopping on a validation figure each rank computes from a list of its own batch losses
(`losses.append(loss.item())`, then `sum(losses) / len(losses)`) breaks the epoch loop on one
rank alone (DDP035), through `ddpcheck lint`; the same figure after an all-reduce is every
rank's."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAINER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, net, optimizer, train_loader, valid_loader, patience, gpu):
            self.model = DDP(net.cuda(gpu), device_ids=[gpu])
            self.optimizer = optimizer
            self.train_loader = train_loader
            self.valid_loader = valid_loader
            self.patience = patience

        def fit(self, epochs):
            best, stale = float("inf"), 0
            for epoch in range(epochs):
                self._train()
                score = self._validate()
                if score < best:
                    best, stale = score, 0
                else:
                    stale += 1
                    if stale >= self.patience:
                        break

        def _train(self):
            self.model.train()
            for x, y in self.train_loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda()).backward()
                self.optimizer.step()

        @torch.no_grad()
        def _validate(self):
            self.model.eval()
            errors = []
            for x, y in self.valid_loader:
                loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
                errors.append(loss.item() ** 0.5)
            RESULT
    """


def _lint(tmp_path, result: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"trainer.py": TRAINER.replace("RESULT", result)})
    return finding_set(tmp_path, "trainer.py", select="DDP035")


def test_stopping_on_the_mean_of_the_ranks_own_losses_is_reported(tmp_path):
    assert _lint(tmp_path, "return sum(errors) / len(errors)") == {("trainer.py", 24, "DDP035")}


def test_the_mean_after_an_all_reduce_is_every_ranks(tmp_path):
    reduced = ("total = torch.tensor([sum(errors), len(errors)], device='cuda')\n"
               "            dist.all_reduce(total)\n"
               "            return (total[0] / total[1]).item()")
    assert _lint(tmp_path, reduced) == set()
