"""What the lint reads of values gathered across ranks and of a network's branches, on mechanisms
seen on public scripts of batch 28, each through `ddpcheck lint` on a small project written in the
style of the scripts, with a variant that must stay silent or be reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


# Predictions and targets gathered from every rank inside the evaluation loop (by a project
# helper that all_gathers each tensor it is handed), unpacked, then moved to the CPU before the
# count: the count is the whole set's.
GATHER_UTIL = """\
    import torch
    import torch.distributed as dist


    def gather_all(tensors):
        out = []
        for t in tensors:
            slots = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
            dist.all_gather(slots, t)
            out.append(torch.cat(slots, dim=0))
        return out
"""

GATHER_EVAL = """\
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    import comm


    def evaluate(model, test_set, args):
        loader = DataLoader(test_set, batch_size=256, sampler=DistributedSampler(test_set, shuffle=False))
        model.eval()
        hits = 0
        with torch.no_grad():
            for images, labels in loader:
                labels = labels.cuda()
                guess = model(images.cuda()).argmax(dim=1)
                {gather}
                guess = guess.cpu()
                labels = labels.cpu()
                hits += guess.eq(labels).sum().item()
        if dist.get_rank() == 0:
            print("accuracy", hits / len(test_set))
"""


def test_count_of_predictions_gathered_in_the_loop_is_clean(tmp_path: Path) -> None:
    files = {"comm.py": GATHER_UTIL, "train.py": GATHER_EVAL.format(
        gather="if args.world > 1:\n                    guess, labels = comm.gather_all([guess, labels])")}
    assert lines(tmp_path, files, "DDP036") == []


def test_count_of_predictions_gathered_unconditionally_is_clean(tmp_path: Path) -> None:
    files = {"comm.py": GATHER_UTIL, "train.py": GATHER_EVAL.format(
        gather="guess, labels = comm.gather_all([guess, labels])")}
    assert lines(tmp_path, files, "DDP036") == []


def test_count_of_predictions_not_gathered_is_reported(tmp_path: Path) -> None:
    files = {"comm.py": GATHER_UTIL, "train.py": GATHER_EVAL.format(gather="pass")}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 20)]


def test_count_beside_a_gather_of_other_values_is_reported(tmp_path: Path) -> None:
    # Only the logits are gathered (for a later confusion matrix); the count is this rank's.
    files = {"comm.py": GATHER_UTIL, "train.py": GATHER_EVAL.format(
        gather="[everyone] = comm.gather_all([images.cuda()])")}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 20)]


# A Hugging Face vision network picked by a command-line option: transformers' ResNet is made of
# convolutions with BatchNorm2d; its ViT and Swin use LayerNorm.
HF_VISION = """\
    import argparse
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def build(args, rank):
        if args.model == "vit":
            from transformers import ViTConfig, ViTForImageClassification
            net = ViTForImageClassification(ViTConfig(image_size=32, num_labels=100))
        elif args.model == "resnet":
            from transformers import ResNetConfig, ResNetForImageClassification
            net = ResNetForImageClassification(ResNetConfig(num_labels=100))
        net = net.to(torch.device("cuda", rank))
        net = DDP(net, device_ids=[rank])
        return net


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--model", type=str, default="{default}", choices=["vit", "resnet"])
        args = parser.parse_args()
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = build(args, rank)
"""


def test_transformers_resnet_by_default_is_reported(tmp_path: Path) -> None:
    files = {"train.py": HF_VISION.format(default="resnet")}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 16)]


def test_transformers_vit_by_default_is_clean(tmp_path: Path) -> None:
    files = {"train.py": HF_VISION.format(default="vit")}
    assert lines(tmp_path, files, "DDP012") == []


def test_pretrained_transformers_resnet_is_reported(tmp_path: Path) -> None:
    files = {"train.py": HF_VISION.format(default="resnet").replace(
        "ResNetForImageClassification(ResNetConfig(num_labels=100))",
        "ResNetForImageClassification.from_pretrained(\"microsoft/resnet-50\")")}
    assert lines(tmp_path, files, "DDP012") == [("train.py", 16)]


def test_transformers_resnet_converted_to_sync_batchnorm_is_clean(tmp_path: Path) -> None:
    files = {"train.py": HF_VISION.format(default="resnet").replace(
        "net = DDP(", "net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)\n        net = DDP(")}
    assert lines(tmp_path, files, "DDP012") == []


# A network whose forward computes a second branch and returns only the first: the second
# branch's layers never reach the loss, so DDP waits for their gradients.
BRANCHES = """\
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    class TwoBranch(nn.Module):
        def __init__(self, dim, cond):
            super().__init__()
            self.act = nn.LeakyReLU(0.01)
            self.main_linear = nn.Linear(dim + cond, dim)
            self.side_linear = nn.Linear(cond, dim)
            self.head = nn.Linear(dim, 1)

        def forward(self, x, c):
            h = self.main_linear(torch.cat([x, c], -1))
            h = self.act(h)
            side = self.side_linear(c)
            side = self.act(side)
            {use}
            return self.head(h)


    def main(local_rank, loader):
        dist.init_process_group("nccl")
        net = TwoBranch(32, 4).cuda(local_rank)
        net = DDP(net, device_ids=[local_rank])
        opt = torch.optim.Adam(net.parameters())
        for x, c, y in loader:
            loss = (net(x.cuda(), c.cuda()) - y.cuda()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_branch_computed_in_forward_but_never_returned_is_reported(tmp_path: Path) -> None:
    files = {"train.py": BRANCHES.format(use="pass")}
    assert lines(tmp_path, files, "DDP026") == [("train.py", 12)]


def test_branch_computed_in_forward_and_added_to_the_output_is_clean(tmp_path: Path) -> None:
    files = {"train.py": BRANCHES.format(use="h = h + side")}
    assert lines(tmp_path, files, "DDP026") == []


def test_branch_kept_on_the_module_is_clean(tmp_path: Path) -> None:
    # Stored for a caller that may add it to the loss: unknown, so not reported.
    files = {"train.py": BRANCHES.format(use="self.last_side = side")}
    assert lines(tmp_path, files, "DDP026") == []


def test_branch_handed_to_a_call_is_clean(tmp_path: Path) -> None:
    files = {"train.py": BRANCHES.format(use="self.cache.append(side)")}
    assert lines(tmp_path, files, "DDP026") == []


def test_branch_read_by_a_condition_is_clean(tmp_path: Path) -> None:
    files = {"train.py": BRANCHES.format(use="if side.mean() > 0:\n                h = h * 2")}
    assert lines(tmp_path, files, "DDP026") == []


def test_branch_added_in_place_to_the_output_is_clean(tmp_path: Path) -> None:
    files = {"train.py": BRANCHES.format(use="pass").replace(
        "side = self.act(side)", "side = h.add_(self.act(side))")}
    assert lines(tmp_path, files, "DDP026") == []


# Pair verification: embeddings collected over the rank's shard, handed to a project helper
# whose figures come back unpacked into names, then printed.
ROC_UTIL = """\
    import numpy as np
    {imports}


    def roc_figures(emb_a, emb_b, same):
        {body}
        dist_ = ((emb_a - emb_b) ** 2).sum(1).numpy()
        same = np.asarray(same)
        thresholds = np.arange(0, 4, 0.01)
        tp = np.array([((dist_ < t) & same).sum() for t in thresholds])
        fp = np.array([((dist_ < t) & ~same).sum() for t in thresholds])
        best = thresholds[np.argmax(tp - fp)]
        return tp, fp, best
"""

ROC_EVAL = """\
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, DistributedSampler
    from metrics import roc_figures


    class Learner:
        def __init__(self, model, val_set, batch_size):
            self.model = model
            self.val_loader = DataLoader(val_set, batch_size=batch_size,
                                         sampler=DistributedSampler(val_set, shuffle=False))

        def evaluate(self, device):
            self.model.eval()
            embs_a, embs_b, same_list = [], [], []
            with torch.no_grad():
                for batch in self.val_loader:
                    embs_a.append(F.normalize(self.model(batch["a"].to(device))).cpu())
                    embs_b.append(F.normalize(self.model(batch["b"].to(device))).cpu())
                    same_list += batch["same"]
            tp, fp, best = roc_figures(torch.vstack(embs_a), torch.vstack(embs_b), same_list)
            precision = tp.max() / (tp.max() + fp.max())
            print("best threshold", best, "precision", precision)
"""


def test_figures_unpacked_from_a_helper_on_the_shard_are_reported(tmp_path: Path) -> None:
    files = {"metrics.py": ROC_UTIL.format(imports="", body="pass"), "train.py": ROC_EVAL}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 23)]


def test_figures_unpacked_from_a_helper_that_gathers_are_clean(tmp_path: Path) -> None:
    files = {"metrics.py": ROC_UTIL.format(
        imports="import torch\n    import torch.distributed as dist",
        body="parts = [None] * dist.get_world_size()\n"
             "        dist.all_gather_object(parts, (emb_a, emb_b, same))\n"
             "        emb_a = torch.cat([p[0] for p in parts])\n"
             "        emb_b = torch.cat([p[1] for p in parts])\n"
             "        same = [s for p in parts for s in p[2]]"),
        "train.py": ROC_EVAL}
    assert lines(tmp_path, files, "DDP036") == []


def test_loss_read_before_the_labels_are_gathered_is_reported(tmp_path: Path) -> None:
    # The loss is computed from this rank's labels; only afterwards are they gathered.
    files = {"comm.py": GATHER_UTIL, "train.py": GATHER_EVAL.format(gather="pass").replace(
        "hits += guess.eq(labels).sum().item()",
        "hits += torch.nn.functional.cross_entropy(guess.float(), labels).item()\n"
        "                [guess, labels] = comm.gather_all([guess, labels])")}
    assert lines(tmp_path, files, "DDP036") == [("train.py", 21)]
