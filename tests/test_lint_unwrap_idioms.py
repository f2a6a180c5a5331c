"""How projects unwrap the DDP model where they save it and call DDP's forward by name, through
`ddpcheck lint`: `(m.module if multi_gpu else m).state_dict()`, `if args.distributed: model =
model.module` in a save helper, `ddp_model.forward(...)` in the training step."""

from __future__ import annotations

from tests.helpers import finding_set as _findings, write_project as _write

SPEAKER_TRAIN = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rank, cfg):
        if cfg.n_gpus_per_node * cfg.n_nodes > 1:
            dist.init_process_group("nccl", init_method=cfg.dist_url, world_size=cfg.n_gpus_per_node * cfg.n_nodes, rank=rank)
        device = torch.device(f"cuda:{rank:d}")
        torch.cuda.set_device(device)
        model = Embedder(cfg.model).to(device)
        loss_fn = Criterion().to(device)
        if cfg.n_gpus_per_node * cfg.n_nodes > 1:
            model = DDP(model, device_ids=[rank])
            loss_fn = DDP(loss_fn, device_ids=[rank])
        optim = torch.optim.AdamW(list(model.parameters()) + list(loss_fn.parameters()), cfg.lr)
        for step, (x, y) in enumerate(cfg.loader):
            loss = loss_fn(model(x.to(device)), y.to(device))
            optim.zero_grad()
            loss.backward()
            optim.step()
            if rank == 0 and step % cfg.checkpoint_interval == 0:
                torch.save({
                    "model": (model.module if cfg.n_gpus_per_node * cfg.n_nodes > 1 else model).state_dict(),
                    "loss_fn": (loss_fn.module if cfg.n_gpus_per_node * cfg.n_nodes > 1 else loss_fn).state_dict(),
                    "optim": optim.state_dict(),
                }, f"{cfg.out}/ckpt_{step:08d}.pt")
        if cfg.n_gpus_per_node * cfg.n_nodes > 1:
            dist.destroy_process_group()
    """


def test_a_save_that_picks_the_inner_module_when_wrapped_keeps_no_prefix(tmp_path):
    _write(tmp_path, {"train.py": SPEAKER_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_the_wrapper_state_dict_saved_without_unwrapping_is_still_reported(tmp_path):
    _write(tmp_path, {"train.py": SPEAKER_TRAIN.replace("(model.module if cfg.n_gpus_per_node * cfg.n_nodes > 1 else model)", "model")})
    assert _findings(tmp_path, "train.py", select="DDP019") == {("train.py", 24, "DDP019")}


SEGMENTATION_TRAIN = """\
    import os

    import torch
    import torch.distributed as dist
    from torch import nn


    def save_checkpoint(model, args, is_best=False):
        filename = os.path.join(args.save_dir, f"{args.model}_{args.dataset}.pth")
        if args.distributed:
            model = model.module
        torch.save(model.state_dict(), filename)


    class Trainer:
        def __init__(self, args):
            self.args = args
            self.model = build_model(args.model).to(args.device)
            if args.distributed:
                self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[args.local_rank],
                                                                 output_device=args.local_rank)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr)

        def train(self):
            for epoch in range(self.args.epochs):
                for images, targets in self.args.loader:
                    loss = self.model(images, targets)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                if self.args.local_rank == 0:
                    save_checkpoint(self.model, self.args)


    if __name__ == "__main__":
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
        if args.distributed:
            torch.cuda.set_device(args.local_rank)
            dist.init_process_group("nccl", init_method="env://")
        Trainer(args).train()
        if args.distributed:
            dist.destroy_process_group()
    """


def test_a_save_helper_that_unwraps_when_distributed_keeps_no_prefix(tmp_path):
    _write(tmp_path, {"train.py": SEGMENTATION_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP019") == set()


def test_a_save_helper_that_never_unwraps_is_still_reported(tmp_path):
    _write(tmp_path, {"train.py": SEGMENTATION_TRAIN.replace("model = model.module", "print(f'saving {filename}')")})
    assert _findings(tmp_path, "train.py", select="DDP019") == {("train.py", 12, "DDP019")}


GPT2_TRAIN = """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from transformers import GPT2Config, GPT2LMHeadModel


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", default=5, type=int)
        parser.add_argument("--output_dir", default="model/", type=str)
        args = parser.parse_args()

        dist.init_process_group(backend="nccl", init_method="env://")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)

        model = GPT2LMHeadModel(config=GPT2Config())
        model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1.5e-4)
        dataset = torch.load("tokens.pt")
        sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler)
        model = DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)

        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for batch in loader:
                batch = batch.to(device)
                outputs = model.forward(input_ids=batch, labels=batch)
                loss = outputs[0]
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            model_to_save = model.module if hasattr(model, "module") else model
            model_to_save.save_pretrained(os.path.join(args.output_dir, f"model_epoch{epoch + 1}"))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """


def test_calling_the_wrappers_forward_by_name_is_a_synchronised_forward(tmp_path):
    _write(tmp_path, {"train.py": GPT2_TRAIN})
    assert _findings(tmp_path, "train.py", select="DDP013") == set()


def test_calling_the_inner_modules_forward_by_name_is_still_reported(tmp_path):
    _write(tmp_path, {"train.py": GPT2_TRAIN.replace("outputs = model.forward(", "outputs = model.module.forward(")})
    assert ("train.py", 33, "DDP013") in _findings(tmp_path, "train.py", select="DDP013")
