"""DDP024 for the compiled DDP model, whose checkpoint keys start with `_orig_mod.module.`: a
project loader that drops only `_orig_mod.` still leaves the wrapper's `module.`, so it does not
read those checkpoints back into a plain model. Through `ddpcheck lint` on a small project with a
trainer class that compiles the wrapper on a configuration key; loaders that drop both prefixes,
and the compiled plain model, stay silent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import finding_lines as lines


TRAINER = """\
    import os
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, optimizer, params, out_dir, rank=0, world_size=1):
            self.out_dir = out_dir
            model.to(f"cuda:{rank}")
            if world_size > 1:
                self.model = DDP(model, device_ids=[rank])
            else:
                self.model = model
            if params.get("compile", False):
                self.model = torch.compile(self.model)
            self.optimizer = optimizer
            self.rank = rank

        def fit(self, loader, epochs):
            for epoch in range(epochs):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda())
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                if self.rank == 0:
                    self.save(epoch)

        def save(self, epoch):
            weights = (self.model.module.state_dict()
                       if isinstance(self.model, DDP) else self.model.state_dict())
            torch.save(weights, os.path.join(self.out_dir, "model.pth"))
"""

TRAIN = """\
    import json
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from trainer import Trainer


    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        params = json.load(open("train.json"))
        model = torch.nn.Linear(8, 8)
        optimizer = torch.optim.AdamW(model.parameters(), lr=params["lr"])
        loader = [(torch.randn(4, 8), torch.randn(4, 8))]
        Trainer(model, optimizer, params, "out", rank, world_size).fit(loader, params["epochs"])
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
"""

# An older transfer script that loads a checkpoint into a plain model, renaming its keys.
TRANSFER = """\
    import torch


    def load_pretrained(model, path):
        state = torch.load(path, map_location="cpu")
        state = {{rename}: v for k, v in state.items()}
        model.load_state_dict(state)
        return model
"""


def _project(rename: str) -> dict[str, str]:
    return {"train.py": TRAIN, "trainer.py": TRAINER, "transfer.py": TRANSFER.replace("{rename}", rename)}


def test_loader_dropping_only_the_compile_prefix_leaves_the_wrapper_prefix(tmp_path: Path) -> None:
    files = _project('(k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k)')
    assert lines(tmp_path, files, "DDP024") == [("trainer.py", 31)]


def test_loader_dropping_both_prefixes_reads_the_compiled_ddp_model_back(tmp_path: Path) -> None:
    files = _project('k.replace("_orig_mod.", "").replace("module.", "")')
    assert lines(tmp_path, files, "DDP024") == []


def test_loader_dropping_the_compile_prefix_reads_the_compiled_plain_model_back(tmp_path: Path) -> None:
    # Without the DDP wrapper the keys start with `_orig_mod.` alone.
    files = _project('(k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k)')
    files["trainer.py"] = files["trainer.py"].replace(
        "            if world_size > 1:\n"
        "                self.model = DDP(model, device_ids=[rank])\n"
        "            else:\n"
        "                self.model = model\n",
        "            self.model = model\n")
    assert lines(tmp_path, files, "DDP024") == []
