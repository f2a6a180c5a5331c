"""Gradient accumulation without `no_sync` (DDP016) where the loop's `if` on the accumulation
counter steps in one arm and back-propagates the accumulating micro-batches in its `else`,
through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAINER = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, optimizer, accum_steps=1):
            self.model = model
            self.optimizer = optimizer
            self.accum_steps = accum_steps
            self.scaler = torch.cuda.amp.GradScaler()
            self.global_step = 0

        def training_step(self, batch):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y) / self.accum_steps
            self.scaler.scale(loss).backward()
            return loss

        def train_epoch(self, loader):
            for batch in loader:
                self.global_step += 1
                TEST
                if should_step:
                    loss = self.training_step(batch)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    self.optimizer.zero_grad()
                else:
                    loss = self.training_step(batch)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), accum_steps=4)
        for epoch in range(3):
            trainer.train_epoch(torch.utils.data.DataLoader(list(range(16))))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _lint(tmp_path, test: str) -> set[tuple[str, int, str]]:
    write_project(tmp_path, {"train.py": TRAINER.replace("TEST", test)})
    return finding_set(tmp_path, "train.py", select="DDP016")


def test_micro_batches_in_the_else_of_the_counter_test_are_reported(tmp_path):
    assert _lint(tmp_path, "should_step = self.global_step % self.accum_steps == 0") == {("train.py", 32, "DDP016")}


def test_an_else_arm_of_a_test_that_is_no_counter_is_clean(tmp_path):
    # An AMP switch, not an accumulation counter: each arm steps or not on its own terms.
    assert _lint(tmp_path, "should_step = self.scaler.is_enabled()") == set()


PLAIN_LOOP = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(model, loader, optimizer, accum):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y) / accum
            # with model.no_sync():  (tried, slower on one node)
            loss.backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        net = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[rank])
        train(net, torch.utils.data.DataLoader(list(range(8))), torch.optim.SGD(net.parameters(), lr=0.1), 4)
    """


def test_a_no_sync_left_in_a_comment_skips_nothing(tmp_path):
    write_project(tmp_path, {"train.py": PLAIN_LOOP})
    assert finding_set(tmp_path, "train.py", select="DDP016") == {("train.py", 12, "DDP016")}
