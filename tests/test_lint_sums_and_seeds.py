"""Reduced metrics and seeds as training projects write them, through `ddpcheck lint`: each test
writes a small project and checks the exact findings, with the variant that is (or is not)
reported."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write


def _lint(tmp_path, files: dict[str, str], target: str, select: str) -> set[tuple[str, int, str]]:
    _write(tmp_path, files)
    return _findings(tmp_path, target, select=select)


# --- DDP022: one finding per tensor and function; unused variants; histograms ------------------

EVALUATE = """\
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F


    def validate(loader, model, criterion, flip):
        model.eval()
        total_loss = 0.0
        for image, target in loader:
            with torch.no_grad():
                output = model(image)
                loss = criterion(output, target).detach()
                dist.all_reduce(loss, dist.ReduceOp.SUM)
                total_loss += loss
                if flip:
                    output = model(torch.flip(image, dims=(3,)))
                    loss = criterion(output, target).detach()
                    dist.all_reduce(loss, dist.ReduceOp.SUM)
                    total_loss += loss
        return total_loss / len(loader)


    def validate_cpu(loader, model, criterion):
        total_loss = 0.0
        for image, target in loader:
            loss = criterion(model(image), target).detach()
            dist.all_reduce(loss, dist.ReduceOp.SUM)
            total_loss += loss
        return total_loss / len(loader)


    def main():
        dist.init_process_group("nccl")
        model, loader, criterion = build()
        print(validate(loader, model, criterion, flip=True))
    {call}

    if __name__ == "__main__":
        main()
    """


def test_a_loss_reduced_twice_in_one_function_is_one_finding_and_an_unused_variant_none(tmp_path):
    assert _lint(tmp_path, {"train.py": EVALUATE.format(call="")}, "train.py", "DDP022") == {
        ("train.py", 13, "DDP022")}


def test_the_variant_reported_once_it_is_called(tmp_path):
    text = EVALUATE.format(call="    print(validate_cpu(loader, model, criterion))\n")
    assert _lint(tmp_path, {"train.py": text}, "train.py", "DDP022") == {
        ("train.py", 13, "DDP022"), ("train.py", 27, "DDP022")}


CONFUSION = """\
    import numpy as np
    import torch
    import torch.distributed as dist


    def fast_hist(pred, gt, n):
        keep = (gt >= 0) & (gt < n)
        return np.bincount(n * gt[keep].astype(int) + pred[keep], minlength=n ** 2).reshape(n, n)


    def validate(loader, net, classes):
        iou_acc = 0
        for images, labels in loader:
            preds = net(images).argmax(1)
            iou_acc += {count}
        iou_acc_tensor = torch.cuda.FloatTensor(iou_acc)
        dist.all_reduce(iou_acc_tensor, op=dist.ReduceOp.SUM)
        iou_acc = iou_acc_tensor.cpu().numpy()
        return np.diag(iou_acc) / (iou_acc.sum(0) + iou_acc.sum(1) - np.diag(iou_acc))


    if __name__ == "__main__":
        dist.init_process_group("nccl")
        print(validate(*build()))
    """


def test_a_tensor_made_from_accumulated_histograms_is_a_count(tmp_path):
    text = CONFUSION.format(count="fast_hist(preds.numpy().flatten(), labels.numpy().flatten(), classes)")
    assert _lint(tmp_path, {"val.py": text}, "val.py", "DDP022") == set()


def test_a_tensor_made_from_accumulated_scores_is_reported(tmp_path):
    text = CONFUSION.format(count="(preds == labels).float().mean().item()")
    assert _lint(tmp_path, {"val.py": text}, "val.py", "DDP022") == {("val.py", 17, "DDP022")}
