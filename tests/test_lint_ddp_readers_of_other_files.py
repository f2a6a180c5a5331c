"""DDP019 and the project's other checkpoint readers, through `ddpcheck lint` on small projects:
a distributed evaluation script that loads a different file than the run saves does not read
the run's checkpoints back with their `module.` prefix, and a prefix named only in a comment of
a reader is no rename the code does. Variants where the reader does read them stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAIN = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from net import Segmenter


    def main():
        dist.init_process_group("nccl")
        device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}")
        model = DistributedDataParallel(Segmenter().to(device), device_ids=[device])
        optimizer = torch.optim.Adam(model.parameters(), 1e-4)
        best = -1.0
        for epoch in range(10):
            loss = model(torch.randn(2, 1, 32, 32, device=device)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            metric = -loss.item()
            if dist.get_rank() == 0 and metric > best:
                best = metric
                torch.save(model.state_dict(), "{saved}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

NET = """\
    import torch.nn as nn


    class Segmenter(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, padding=1)

        def forward(self, x):
            return self.conv(x)
"""

# A distributed evaluation script of another example in the same folder: it wraps its model and
# loads a file by a spelled name.
EVALUATE_DDP = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from net import Segmenter


    def evaluate():
        dist.init_process_group("nccl")
        device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}")
        model = DistributedDataParallel(Segmenter().to(device), device_ids=[device])
        model.load_state_dict(torch.load("{read}", map_location={"cuda:0": f"cuda:{device.index}"}))
        model.eval()
        with torch.no_grad():
            print(model(torch.randn(1, 1, 32, 32, device=device)).mean())


    if __name__ == "__main__":
        evaluate()
"""


def _with_ddp_reader(saved: str, read: str) -> dict[str, str]:
    return {"train.py": TRAIN.replace("{saved}", saved), "net.py": NET,
            "evaluate_ddp.py": EVALUATE_DDP.replace("{read}", read)}


def test_ddp_reader_of_another_file_does_not_read_the_run_back(tmp_path: Path) -> None:
    files = _with_ddp_reader("best_metric_model.pth", "final_model.pth")
    assert lines(tmp_path, files, "DDP019") == [("train.py", 22)]


def test_ddp_reader_of_the_saved_file_reads_it_back(tmp_path: Path) -> None:
    # The evaluation script loads the very file the run writes into its own DDP model.
    files = _with_ddp_reader("best_metric_model.pth", "best_metric_model.pth")
    assert lines(tmp_path, files, "DDP019") == []


def test_ddp_reader_of_an_unspelled_file_may_read_the_run_back(tmp_path: Path) -> None:
    # (Which file a command-line path names is not known: any checkpoint may be it.)
    files = _with_ddp_reader("best_metric_model.pth", "final_model.pth")
    files["evaluate_ddp.py"] = files["evaluate_ddp.py"].replace(
        'torch.load("final_model.pth"', 'torch.load(os.environ["CKPT"]')
    assert lines(tmp_path, files, "DDP019") == []


# An evaluation script that rebuilds the state dict entry by entry; the rename it once made is
# left in a comment only.
EVALUATE_PLAIN = """\
    import torch
    from net import Segmenter


    def evaluate(path):
        model = Segmenter()
        loaded = torch.load(path, map_location="cpu")
        sd = model.state_dict()
        for k in model.state_dict():
            {rename}
            if key in loaded:
                sd[k] = loaded[key]
        model.load_state_dict(sd)
        return model
"""


def _with_plain_reader(rename: str) -> dict[str, str]:
    return {"train.py": TRAIN.replace("{saved}", "best.pth"), "net.py": NET,
            "evaluate.py": EVALUATE_PLAIN.replace("{rename}", rename)}


def test_prefix_named_in_a_comment_is_no_rename(tmp_path: Path) -> None:
    files = _with_plain_reader('key = k  # key = "module." + k')
    assert lines(tmp_path, files, "DDP019") == [("train.py", 22)]


def test_prefix_added_in_code_is_a_rename(tmp_path: Path) -> None:
    # The reader matches the wrapper's keys itself.
    files = _with_plain_reader('key = "module." + k')
    assert lines(tmp_path, files, "DDP019") == []
