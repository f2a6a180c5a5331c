"""Padding evaluation samplers (DDP018), through `ddpcheck lint`, where the padding cannot count
twice or the sampler is never made:

- each rank keeps its predictions in a dict keyed by sample index, the dicts are gathered with
  `all_gather_object` and merged by key (`for part in gathered: for idx, p in part.items():
  merged[idx] = p`): a padded repeat writes its sample's slot again. Gathered into one list
  (`merged.extend(part.values())`), the repeats count, and it is reported;
- a data builder of the script that nothing calls or names (a variant left beside the one the
  run uses) makes no sampler, padding or not."""

from __future__ import annotations

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def make_loaders_v0(args):
        val_set = SpectraDataset(args.val_file)
        sampler = DistributedSampler(val_set, shuffle=False)
        return DataLoader(val_set, batch_size=64, sampler=sampler)


    def make_loaders(args):
        train_set = SpectraDataset(args.train_file)
        val_set = SpectraDataset(args.val_file)
        train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        val_loader = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))
        return train_loader, val_loader


    def validate(model, val_loader):
        model.eval()
        mine = {{}}
        with torch.no_grad():
            for idx, x, y in val_loader:
                for i, pred in zip(idx.tolist(), model(x.cuda()).argmax(-1).tolist()):
                    mine[i] = pred
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, mine)
        merged = {merged}
        for part in parts:
            {merge}
        return merged


    def main(args):
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        model = DDP(Classifier().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.Adam(model.parameters())
        train_loader, val_loader = make_loaders(args)
        for epoch in range(args.epochs):
            train_loader.sampler.set_epoch(epoch)
            for idx, x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            preds = validate(model, val_loader)
            if dist.get_rank() == 0:
                print(accuracy(preds, val_loader.dataset.labels))


    if __name__ == "__main__":
        main(parse_args())
"""

KEYED = "for i, pred in part.items():\n                merged[i] = pred"
LISTED = "merged.extend(part.values())"


def test_predictions_merged_by_sample_key_are_not_reported(tmp_path) -> None:
    write_project(tmp_path, {"train.py": SCRIPT.format(merged="{}", merge=KEYED)})
    assert finding_set(tmp_path, "train.py", select="DDP018") == set()


def test_predictions_merged_into_one_list_are_reported_at_the_used_builder_only(tmp_path) -> None:
    # (the builder nothing calls, line 11, is not reported)
    write_project(tmp_path, {"train.py": SCRIPT.format(merged="[]", merge=LISTED)})
    assert finding_set(tmp_path, "train.py", select="DDP018") == {("train.py", 19, "DDP018")}
