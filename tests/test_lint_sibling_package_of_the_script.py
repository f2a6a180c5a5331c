"""A script in a plain folder of a package (`pkg/cli/train.py`) that imports the package's other
subpackages by their own names (`from engine.loop import fit`: it is started with `PYTHONPATH=.`
from `pkg/`), and loaders named with the short `_va` for validation, through `ddpcheck lint`
(DDP018): the helper is read, and the builder's `dl_va` loader is an evaluation one."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_set, write_project

SCRIPT = """\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from engine.loop import fit


    def make_loader(x_part, y_part, batch):
        ds = TensorDataset(x_part, y_part)
        sampler = DistributedSampler(ds, shuffle=True)
        return DataLoader(ds, batch_size=batch, sampler=sampler)


    def main():
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        x_tr, y_tr = torch.load("train.pt")
        x_va, y_va = torch.load("dev.pt")
        dl_tr = make_loader(x_tr, y_tr, 64)
        dl_va = make_loader(x_va, y_va, 64)
        model = DDP(torch.nn.Linear(8, 1).cuda(local_rank), device_ids=[local_rank])
        fit(model, dl_tr, dl_va, epochs=3)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """

LOOP = """\
    import torch
    from torchmetrics.classification import BinaryAUROC


    def fit(model, dl_train, dl_val, epochs):
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
        for ep in range(epochs):
            dl_train.sampler.set_epoch(ep)
            for x, y in dl_train:
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x.cuda()).squeeze(1), y.cuda())
                optim.zero_grad()
                loss.backward()
                optim.step()
            print(evaluate(model, dl_val))


    @torch.no_grad()
    def evaluate(model, dl):
        auroc = BinaryAUROC().cuda()
        for x, y in dl:
            auroc.update(model(x.cuda()).squeeze(1).sigmoid(), y.cuda().long())
        return auroc.compute().item()
    """


def _lint(tmp_path: Path, loop: str = LOOP) -> set[tuple[str, int, str]]:
    files = {"pyproject.toml": "[project]\nname = 'pkg'\n", "pkg/__init__.py": "", "pkg/cli/train.py": SCRIPT,
             "pkg/engine/__init__.py": "", "pkg/engine/loop.py": loop}
    write_project(tmp_path, files)
    return finding_set(tmp_path, "pkg/cli/train.py", select="DDP018")


def test_a_sibling_package_of_the_script_s_folder_is_read(tmp_path: Path) -> None:
    # The metric is synced over the ranks in the helper; the builder's `dl_va` pads.
    assert _lint(tmp_path) == {("train.py", 13, "DDP018")}


def test_a_metric_of_the_sibling_package_that_does_not_sync_is_clean(tmp_path: Path) -> None:
    loop = LOOP.replace("BinaryAUROC()", "BinaryAUROC(sync_on_compute=False)")
    assert _lint(tmp_path, loop) == set()
