"""A validation metric kept in running-average meters the trainer object holds (`self.val_loss.
update(loss.item(), n)`), over a DistributedSampler loader wrapped in a progress bar bound to a
name first (`bar = tqdm(self.val_loader)`), is one rank's shard's figure when printed without a
reduction (DDP036), through `ddpcheck lint`."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from tqdm import tqdm


    class Meter:
        def __init__(self):
            self.sum, self.count, self.avg = 0.0, 0, 0.0

        def update(self, value, n=1):
            self.sum += value * n
            self.count += n
            self.avg = self.sum / self.count


    class Trainer:
        def __init__(self, net, val_loader):
            self.model = net
            self.val_loader = val_loader
            self.val_loss = Meter()

        @torch.no_grad()
        def validate(self):
            bar = tqdm(self.val_loader)
            for x, y in bar:
                loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
                self.val_loss.update(loss.item(), len(x))
            REDUCE
            print(f"validation loss {self.val_loss.avg:.4f}")


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        net = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
        data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        trainer = Trainer(net, DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False)))
        trainer.validate()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def _lint(tmp_path, reduce: str = "pass", loader: str = "sampler=DistributedSampler(data, shuffle=False)"
          ) -> set[tuple[str, int, str]]:
    text = TRAIN.replace("REDUCE", reduce).replace("sampler=DistributedSampler(data, shuffle=False)", loader)
    write_project(tmp_path, {"train.py": text})
    return finding_set(tmp_path, "train.py", select="DDP036")


def test_a_meter_the_trainer_holds_over_a_sharded_loader_is_reported(tmp_path):
    assert _lint(tmp_path) == {("train.py", 33, "DDP036")}


def test_the_whole_set_on_every_rank_is_clean(tmp_path):
    # No sampler: each rank evaluates the whole set, so its figure is the set's.
    assert _lint(tmp_path, loader="shuffle=False") == set()


def test_meter_sums_reduced_before_the_print_are_clean(tmp_path):
    reduced = ("total = torch.tensor([self.val_loss.sum, self.val_loss.count], device='cuda')\n"
               "            dist.all_reduce(total)\n"
               "            self.val_loss.avg = (total[0] / total[1]).item()")
    assert _lint(tmp_path, reduced) == set()
