"""Validation metrics kept in running-average objects, through `ddpcheck lint`: a meter fed
over one rank's DistributedSampler shard and printed without a reduction is one shard's figure."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

METERS = """\
    class RunningAverage:
        def __init__(self):
            self.total = 0.0
            self.count = 0

        def update(self, value, n=1):
            self.total += value * n
            self.count += n

        @property
        def avg(self):
            return self.total / max(self.count, 1)
    """

FINETUNE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from meters import RunningAverage


    def evaluate(model, loader, device):
        model.eval()
        val_loss = RunningAverage()
        with torch.no_grad():
            for tokens, labels in loader:
                loss = model(tokens.to(device), labels.to(device))
                val_loss.update(loss.item(), tokens.size(0))
        {reduce}print(f"validation loss {{val_loss.avg:.4f}}")
        return val_loss.avg


    def main(train_set, valid_set, net):
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = DDP(net.cuda(), device_ids=[local_rank])
        valid_loader = DataLoader(valid_set, batch_size=32, sampler=DistributedSampler(valid_set, shuffle=False))
        evaluate(model, valid_loader, local_rank)
        dist.destroy_process_group()
    """


def test_a_meter_fed_over_a_shard_and_printed_is_reported(tmp_path):
    _write(tmp_path, {"meters.py": METERS, "finetune.py": FINETUNE.format(reduce="")})
    assert _findings(tmp_path, "finetune.py", select="DDP036") == {("finetune.py", 19, "DDP036")}


def test_a_meter_whose_sums_are_all_reduced_first_is_clean(tmp_path):
    reduce = ("sums = torch.tensor([val_loss.total, val_loss.count], device=device)\n"
              "        dist.all_reduce(sums)\n        ")
    _write(tmp_path, {"meters.py": METERS, "finetune.py": FINETUNE.format(reduce=reduce)})
    assert _findings(tmp_path, "finetune.py", select="DDP036") == set()


def test_an_object_whose_update_does_not_accumulate_is_not_a_meter(tmp_path):
    latest = METERS.replace("self.total += value * n", "self.total = value * n").replace(
        "self.count += n", "self.count = n")
    _write(tmp_path, {"meters.py": latest, "finetune.py": FINETUNE.format(reduce="")})
    assert _findings(tmp_path, "finetune.py", select="DDP036") == set()


def test_a_meter_fed_with_values_all_reduced_in_the_loop_is_clean(tmp_path):
    reduced = FINETUNE.format(reduce="").replace(
        "                val_loss.update(loss.item(), tokens.size(0))",
        "                dist.all_reduce(loss)\n"
        "                val_loss.update(loss.item() / dist.get_world_size(), tokens.size(0))")
    _write(tmp_path, {"meters.py": METERS, "finetune.py": reduced})
    assert _findings(tmp_path, "finetune.py", select="DDP036") == set()


def test_a_meter_of_the_training_loss_stepped_in_a_closure_is_clean(tmp_path):
    training = FINETUNE.format(reduce="").replace(
        "        with torch.no_grad():\n"
        "            for tokens, labels in loader:\n"
        "                loss = model(tokens.to(device), labels.to(device))\n",
        "        if True:\n"
        "            for tokens, labels in loader:\n"
        "                def step():\n"
        "                    out = model(tokens.to(device), labels.to(device))\n"
        "                    out.backward()\n"
        "                    return out\n"
        "                loss = step()\n")
    assert "out.backward()" in training
    _write(tmp_path, {"meters.py": METERS, "finetune.py": training})
    assert _findings(tmp_path, "finetune.py", select="DDP036") == set()
