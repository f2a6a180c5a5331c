"""Predictions gathered from every rank and scored whole count the padding sampler's repeats, like
an all-reduce (DDP018); cut to the set's length or rid of repeats they do not. Through `ddpcheck
lint` on small projects: a gathering helper in another module, an evaluation called from inside
the training loop, a gather of training features, and a sampler only a disabled flag would make.
"""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

GATHER_HELPERS = """\
    import torch
    import torch.distributed as dist


    def gather_tensors(tensor):
        parts = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)
    """

EVALUATOR = """\
    import torch
    from sklearn.metrics import accuracy_score, f1_score

    from utils.dist import gather_tensors


    @torch.no_grad()
    def evaluate(model, loader, device):
        model.eval()
        preds, labels = [], []
        for batch in loader:
            inputs = {{k: v.to(device) for k, v in batch.items() if k != "labels"}}
            preds.append(model(**inputs).logits.argmax(-1))
            labels.append(batch["labels"].to(device))
        all_preds = gather_tensors(torch.cat(preds)){cut}
        all_labels = gather_tensors(torch.cat(labels)){cut}
        return {{"accuracy": accuracy_score(all_labels.cpu(), all_preds.cpu()),
                 "f1": f1_score(all_labels.cpu(), all_preds.cpu(), average="macro")}}
    """

TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from evaluator import evaluate


    def main(model, train_set, dev_set, epochs):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(model.cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        train_sampler = DistributedSampler(train_set, shuffle=True)
        dev_sampler = DistributedSampler(dev_set, shuffle=False)
        train_loader = DataLoader(train_set, batch_size=16, sampler=train_sampler)
        dev_loader = DataLoader(dev_set, batch_size=64, sampler=dev_sampler)
        for epoch in range(epochs):
            train_sampler.set_epoch(epoch)
            for step, batch in enumerate(train_loader):
                loss = model(**{k: v.cuda() for k, v in batch.items()}).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                {evaluate_here}
            {evaluate_after}
        dist.destroy_process_group()


    if __name__ == "__main__":
        main(None, None, None, 3)
    """

METRICS_LINE = 'metrics = evaluate(model, dev_loader, local_rank)\n            if dist.get_rank() == 0:\n                print(metrics)'


def _project(tmp_path, cut="", evaluate_here="pass", evaluate_after=METRICS_LINE):
    _write(tmp_path, {
        "utils/__init__.py": "",
        "utils/dist.py": GATHER_HELPERS,
        "evaluator.py": EVALUATOR.format(cut=cut),
        "train.py": TRAIN.replace("{evaluate_here}", evaluate_here).replace("{evaluate_after}", evaluate_after),
    })
    return _findings(tmp_path, "train.py", select="DDP018")


def test_predictions_gathered_by_a_helper_and_scored_whole_count_the_padding(tmp_path):
    assert _project(tmp_path) == {("train.py", 18, "DDP018")}


def test_predictions_cut_to_the_set_length_stay_clean(tmp_path):
    assert _project(tmp_path, cut="[:len(loader.dataset)]") == set()


def test_an_evaluation_run_from_inside_the_training_loop_still_counts(tmp_path):
    # `if step % 500 == 0: evaluate(...)` sits in the loop that calls backward(); the evaluation
    # has a loop of its own that trains nothing.
    here = "if step % 500 == 0:\n                    print(evaluate(model, dev_loader, local_rank))"
    assert _project(tmp_path, evaluate_here=here, evaluate_after="pass") == {("train.py", 18, "DDP018")}


CONTRASTIVE = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler


    def gather_features(features):
        parts = [torch.zeros_like(features) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, features)
        return torch.cat(parts)


    def contrastive_loss(a, b):
        a, b = gather_features(a), gather_features(b)
        return torch.nn.functional.cross_entropy(a @ b.T, torch.arange(len(a), device=a.device))


    @torch.no_grad()
    def evaluate(model, loader):
        losses = [contrastive_loss(*model(x.cuda())).item() for x in loader]
        return sum(losses) / len(losses)


    def main(model, train_set, val_set, epochs):
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(model.cuda(), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_sampler = DistributedSampler(train_set)
        val_sampler = DistributedSampler(val_set, shuffle=False)
        train_loader = DataLoader(train_set, batch_size=256, sampler=train_sampler)
        val_loader = DataLoader(val_set, batch_size=256, sampler=val_sampler)
        for epoch in range(epochs):
            train_sampler.set_epoch(epoch)
            for x in train_loader:
                loss = contrastive_loss(*model(x.cuda()))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if dist.get_rank() == 0:
                print(epoch, evaluate(model.module, val_loader))


    if __name__ == "__main__":
        main(None, None, None, 1)
    """


def test_features_gathered_for_a_training_loss_are_no_evaluation_metric(tmp_path):
    # The gathering loss is called from the training step; the evaluation's own per-rank mean
    # is printed on rank 0 and never reduced over the ranks.
    _write(tmp_path, {"train.py": CONTRASTIVE})
    assert _findings(tmp_path, "train.py", select="DDP018") == set()


FLAGGED = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from torch.nn.parallel import DistributedDataParallel as DDP


    def gather_all(t):
        parts = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
        return torch.cat(parts)


    def evaluate(model, loader):
        hits = torch.cat([(model(x).argmax(1) == y).float() for x, y in loader])
        return gather_all(hits).mean().item()


    def main(model, datasets):
        dist.init_process_group("gloo")
        model = DDP(model)
        distributed_test = {flag}
        samplers = {{"train": DistributedSampler(datasets["train"]),
                     "test": DistributedSampler(datasets["test"], shuffle=False) if distributed_test else None}}
        loaders = {{k: DataLoader(datasets[k], sampler=s) for k, s in samplers.items()}}
        for x, y in loaders["train"]:
            model(x).sum().backward()
        print(evaluate(model, loaders["test"]))


    if __name__ == "__main__":
        main(None, None)
    """


def test_a_sampler_behind_a_flag_that_is_always_off_is_never_made(tmp_path):
    _write(tmp_path / "off", {"train.py": FLAGGED.format(flag="False")})
    assert _findings(tmp_path / "off", "train.py", select="DDP018") == set()
    _write(tmp_path / "on", {"train.py": FLAGGED.format(flag="True")})
    assert _findings(tmp_path / "on", "train.py", select="DDP018") == {("train.py", 23, "DDP018")}
